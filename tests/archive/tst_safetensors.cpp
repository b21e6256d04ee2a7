#include <QTest>
class TestSafetensors : public QObject {
    Q_OBJECT
};
QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
