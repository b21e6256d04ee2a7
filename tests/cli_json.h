// The JSON side of a captured command-line run (cli_run.h): its stdout as a document, and the
// finding codes `check --json` printed, as the sharded-set suites assert on them; the key paths
// and types of a document, which golden files hold.
#pragma once

#include "cli_run.h"

#include <QByteArray>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStringList>

#include <set>
#include <string>

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

// The shape of a JSON document for golden files (tests/cli/golden/*.schema), one line per key path
// with its type.
inline QString typeName(const QJsonValue& v)
{
    switch (v.type()) {
    case QJsonValue::Null:
        return QStringLiteral("null");
    case QJsonValue::Bool:
        return QStringLiteral("bool");
    case QJsonValue::Double:
        return QStringLiteral("number");
    case QJsonValue::String:
        return QStringLiteral("string");
    case QJsonValue::Array:
        return QStringLiteral("array");
    case QJsonValue::Object:
        return QStringLiteral("object");
    default:
        return QStringLiteral("undefined");
    }
}

// Every key path with its type; array elements are merged under "[]"; object keys that are data
// (by_location's device names) are collapsed to "*".
inline void schemaOf(const QJsonValue& v, const QString& path, std::set<QString>& out)
{
    out.insert(path + QStringLiteral(": ") + typeName(v));
    if (v.isObject()) {
        const QJsonObject o = v.toObject();
        const bool dataKeys = path.endsWith(QStringLiteral("by_location")) || path.endsWith(QStringLiteral("metadata"));
        for (auto it = o.begin(); it != o.end(); ++it) {
            schemaOf(it.value(), path + QLatin1Char('.') + (dataKeys ? QStringLiteral("*") : it.key()), out);
        }
    } else if (v.isArray()) {
        for (const auto& e : v.toArray()) {
            schemaOf(e, path + QStringLiteral("[]"), out);
        }
    }
}

inline QStringList schemaLines(const std::string& json)
{
    std::set<QString> s;
    schemaOf(QJsonDocument::fromJson(QByteArray::fromStdString(json)).object(), QStringLiteral("$"), s);
    return QStringList(s.begin(), s.end());
}

}  // namespace ckpt::test
