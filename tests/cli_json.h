// The JSON side of a captured command-line run (cli_run.h): its stdout as a document, and the
// finding codes `check --json` printed, as the sharded-set suites assert on them.
#pragma once

#include "cli_run.h"

#include <QByteArray>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStringList>

namespace ckpt::test {

inline QJsonObject jsonOf(const CliRun& r)
{
    return QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object();
}

inline QStringList findingCodes(const CliRun& r)
{
    QStringList codes;
    for (const auto& f : jsonOf(r).value(QStringLiteral("findings")).toArray()) {
        codes << f.toObject().value(QStringLiteral("code")).toString();
    }
    return codes;
}

}  // namespace ckpt::test
