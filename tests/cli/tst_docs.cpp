// What the docs say must be what the program does, and cannot fall behind it without this failing:
// - the man page's synopsis and option lists and the bash completion are rendered from the one
//   definition of the options (each command's CLI::App, cli/options.h) and must match packaging/
//   (CKPTSCOPE_UPDATE_DOCS=1 writes them there); each --help lists every option; the README's
//   synopsis names only real options and mentions every one; no doc names an option that is gone;
// - every command example of the README, the man page and each --help runs, on fixtures, with the
//   exit code and the words its docs promise (remote ones against nginx on loopback, GPU ones on
//   the tests' fake driver);
// - the finding codes of README's table and docs/findings.md are the program's (diagnose/codes.h),
//   and every code the sources write is in it;
// - the environment variables the docs name are the ones the code reads, and the man page names
//   every one the program reads.
#include "cli/options.h"
#include "cli_docs.h"
#include "cli_run.h"
#include "diagnose/codes.h"
#include "remote/location.h"
#include "remote/servers.h"

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace {

namespace docs = ckpt::test::docs;

std::string source(const std::string& rel)
{
    return std::string(CKPTSCOPE_SOURCE_DIR) + "/" + rel;
}

std::string readText(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

void writeText(const std::string& path, const std::string& text)
{
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string unroff(std::string s)
{
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"\\-", "-"}, {"\\e", "\\"}, {"\\&", ""}}) {
        for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) {
            s.replace(at, from.size(), to);
        }
    }
    return s;
}

std::vector<std::string> lines(const std::string& text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
        out.push_back(l);
    }
    return out;
}

std::set<std::string> matches(const std::string& text, const std::regex& re, int group = 0)
{
    std::set<std::string> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
        out.insert((*it)[group].str());
    }
    return out;
}

std::string listed(const std::set<std::string>& names)
{
    std::string s;
    for (const auto& n : names) {
        s += (s.empty() ? "" : ", ") + n;
    }
    return s;
}

// A token of `text` equal to `name`: not part of a longer option (`--select` in `--selection`).
// The string literals of C++ source `code`, comments skipped (a comment may cite anything).
std::vector<std::string> stringLiterals(const std::string& code)
{
    std::vector<std::string> out;
    for (std::size_t i = 0; i < code.size(); ++i) {
        if (code.compare(i, 2, "//") == 0) {
            i = code.find('\n', i);
        } else if (code.compare(i, 2, "/*") == 0) {
            i = code.find("*/", i + 2) + 1;
        } else if (code[i] == '\'') {
            for (++i; i < code.size() && code[i] != '\''; ++i) {
                i += code[i] == '\\' ? 1 : 0;
            }
        } else if (code[i] == '"') {
            std::string text;
            for (++i; i < code.size() && code[i] != '"'; ++i) {
                if (code[i] == '\\') {
                    text += code[i++];
                }
                text += code[i];
            }
            out.push_back(text);
        }
        if (i == std::string::npos) {
            break;
        }
    }
    return out;
}

bool mentions(const std::string& text, const std::string& name)
{
    for (std::size_t at = 0; (at = text.find(name, at)) != std::string::npos; at += name.size()) {
        const char before = at == 0 ? ' ' : text[at - 1];
        const char after = at + name.size() < text.size() ? text[at + name.size()] : ' ';
        const auto word = [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_';
        };
        if (!word(before) && !word(after)) {
            return true;
        }
    }
    return false;
}

// ---- Examples --------------------------------------------------------------------------------

// A file an example needs in its folder: copied from `from` (a folder recursively), written with
// `text:` content, or made by running `run:` ckptscope arguments there first.
struct File {
    std::string name;
    std::string from;
};

struct Example {
    std::string command;             // as the docs write it, without its trailing comment
    std::vector<File> files;         // made, in order, in a fresh folder it runs in
    int rc = 0;                      // the exit code its docs promise
    std::vector<std::string> words;  // each in what it prints (stdout and stderr)
    bool remote = false;             // reads over HTTP: runs against the loopback server
};

std::string fixture(const std::string& name)
{
    return std::string(CKPTSCOPE_FIXTURE_DIR) + "/" + name;
}
std::string diffFixture(const std::string& name)
{
    return std::string(CKPTSCOPE_BINARY_DIR) + "/diff_fixtures/" + name;
}
std::string setFixture(const std::string& name)
{
    return std::string(CKPTSCOPE_FIXTURE_DIR) + "/sharded/" + name;
}
const std::string kSample = source("resources/sample/ddp_checkpoint.pt");

// The sample's state dict as a model's `key shape` lines, without DataParallel's `module.`.
const std::string kModelKeys = "text:conv1.weight 16,3,3,3\nconv1.bias 16\nbn1.weight 16\nbn1.bias 16\n"
                               "bn1.running_mean 16\nbn1.running_var 16\nbn1.num_batches_tracked\n"
                               "conv2.weight 32,16,3,3\nconv2.bias 32\nbn2.weight 32\nbn2.bias 32\n"
                               "bn2.running_mean 32\nbn2.running_var 32\nbn2.num_batches_tracked\n"
                               "fc.weight 10,32\nfc.bias 10\n";
// lightning.pt's state dict, as the model has it.
const std::string kLightningKeys = "text:model.layer.weight 3,4\nmodel.layer.bias 3\n";

// Every example of the docs, with what it needs and what it must do. The names are the docs': a
// DDP training checkpoint (the bundled sample) is ddp.pt, a training checkpoint with a `model` key
// saved from cuda:0 is model.pt, and so on.
std::vector<Example> examples()
{
    const File ddp{"ddp.pt", kSample};
    const File model{"model.pt", fixture("train_ckpt.pt")};
    const File exported{"model.safetensors",
                        "run:convert ddp.pt -o model.safetensors --single-card --select state_dict"};
    return {
        // README: the problems ckptscope exists for
        {"ckptscope convert ddp.pt -o single.pt --single-card",
         {ddp},
         0,
         {"rename  strip 'module.' from 16 keys: state_dict/module.conv1.weight -> conv1.weight",
          "remap   cuda:0 -> cpu", "wrote single.pt"}},
        {"ckptscope convert single.pt -o ddp.pt --multi-card",
         {ddp, {"single.pt", "run:convert ddp.pt -o single.pt --single-card"}},
         0,
         {"rename  add 'module.' to 16 keys: state_dict/conv1.weight -> module.conv1.weight", "wrote ddp.pt"}},
        {"ckptscope convert ckpt.pt -o ckpt_cpu.pt --map-location cuda:3=cpu",
         {{"ckpt.pt", fixture("cuda3.pt")}},
         0,
         {"remap   cuda:3 -> cpu", "wrote ckpt_cpu.pt"}},
        {"ckptscope convert whole_model.pt -o state_dict.pt --unwrap",
         {{"whole_model.pt", fixture("whole_model.pt")}},
         0,
         {"unwrap", "wrote state_dict.pt"}},
        {"ckptscope convert model.pt -o model.safetensors --format safetensors",
         {{"model.pt", fixture("tied_clean.pt")}},
         0,
         {"(safetensors)", "wrote model.safetensors"}},
        {"ckptscope convert train.ckpt -o model.pt --select model --drop optimizer",
         {{"train.ckpt", fixture("train_ckpt.pt")}},
         0,
         {"wrote model.pt"}},
        {"ckptscope diff ddp.pt model.safetensors --select state_dict:",
         {ddp, exported},
         0,
         {"Same weights: 16 changed, all only in how they are stored", "saved on cuda:0 -> cpu; bytes identical"}},
        {"ckptscope diff fp32.pt bf16.pt --rtol 1e-2 --atol 1e-2 --summary",
         {{"fp32.pt", diffFixture("base.pt")}, {"bf16.pt", diffFixture("bf16.pt")}},
         1,
         {"fp32.pt vs bf16.pt: differ (", "within rtol 0.01, atol 0.01"}},
        {"ckptscope diff checkpoints/epoch_3/",
         {{"checkpoints/epoch_3", diffFixture("ranks_same")}},
         0,
         {"rank_1.pt: equal", "rank_10.pt: equal"}},
        {"ckptscope check ckpt.pt --against model_keys.txt --select state_dict",
         {{"ckpt.pt", kSample}, {"model_keys.txt", kModelKeys}},
         1,
         {"[unexpected-keys]", "--strip-prefix module."}},
        {"ckptscope testload ckpt.pt --device cuda:1 --json",
         {{"ckpt.pt", kSample}},
         0,
         {"\"device\": \"cuda:1\"", "\"other_devices_touched\": false"}},
        {"ckptscope testload ckpt.pt --ddp-ranks 4", {{"ckpt.pt", kSample}}, 0, {"cuda:0 peaks at 4 x (context"}},
        {"ckptscope testload ckpt.pt --ddp-ranks 4 --map-location cpu", {{"ckpt.pt", kSample}}, 0, {"map_location"}},
        // README: remote files
        {"ckptscope inspect hf://openai-community/gpt2/pytorch_model.bin", {}, 0, {"torch-zip", "remote: "}, true},
        {"ckptscope check hf://openai-community/gpt2", {}, 0, {"[model-folder]", "remote: 3 requests"}, true},
        {"ckptscope inspect hf://meta-llama/Llama-3.1-8B", {}, 0, {"Hugging Face sharded checkpoint"}, true},
        {"ckptscope diff model.safetensors hf://my-org/my-model@v2/model.safetensors",
         {{"model.safetensors", fixture("model.safetensors")}},
         0,
         {"Equal: "},
         true},
        {"ckptscope convert https://example.org/runs/last.ckpt --single-card -o model.pt",
         {},
         0,
         {"wrote model.pt"},
         true},
        // The man page
        {"ckptscope inspect model.pt", {model}, 0, {"model.pt: torch-zip, 27 tensors"}},
        {"ckptscope check --json runs/*.ckpt",
         {{"runs/a.ckpt", fixture("lightning.pt")}, {"runs/b.ckpt", fixture("lightning.pt")}},
         0,
         {"\"files\": [", "runs/b.ckpt"}},
        {"ckptscope convert single.pt -o ddp.pt --add-prefix module.",
         {ddp, {"single.pt", "run:convert ddp.pt -o single.pt --single-card --select state_dict"}},
         0,
         {"-> module.conv1.weight", "wrote ddp.pt"}},
        {"ckptscope convert ckpt.pt -o cpu.pt --map-location cuda:3=cpu",
         {{"ckpt.pt", fixture("cuda3.pt")}},
         0,
         {"remap   cuda:3 -> cpu", "wrote cpu.pt"}},
        {"ckptscope testload model.pt --device cuda:1", {model}, 0, {"cuda:1"}},
        {"ckptscope testload model.pt --device cuda:0 --verify --json",
         {model},
         0,
         {"\"storage_checks\"", "\"matches_file\": true"}},
        {"ckptscope testload ddp.pt --ddp-ranks 4 --map-location cpu", {ddp}, 0, {"map_location"}},
        {"ckptscope convert https://example.org/last.ckpt -o model.pt --single-card", {}, 0, {"wrote model.pt"}, true},
        // inspect --help
        {"ckptscope inspect hf://openai-community/gpt2/model.safetensors", {}, 0, {"safetensors", "remote: "}, true},
        {"ckptscope inspect --json model.pt | jq '.totals.by_location'", {model}, 0, {"\"cuda:0\""}},
        {"ckptscope inspect --depth 1 'runs/*.ckpt'",
         {{"runs/a.ckpt", fixture("lightning.pt")}, {"runs/b.ckpt", fixture("lightning.pt")}},
         0,
         {"runs/a.ckpt: torch-zip", "runs/b.ckpt: torch-zip"}},
        // check --help
        {"ckptscope check model.pt", {model}, 1, {"[device-pinned]", "[not-weights-only]"}},
        {"ckptscope check hf://ORG/REPO/pytorch_model.bin", {}, 0, {"remote: "}, true},
        {"ckptscope check --json --values model.pt", {model}, 1, {"\"code\": \"device-pinned\""}},
        {"ckptscope check last.ckpt --against model_keys.txt --select state_dict",
         {{"last.ckpt", fixture("lightning.pt")}, {"model_keys.txt", kLightningKeys}},
         0,
         {"[strict-load-ok]"}},
        // convert --help
        {"ckptscope convert ddp.pt -o model.pt --single-card", {ddp}, 0, {"wrote model.pt"}},
        {"ckptscope convert model.pt -o ddp.pt --multi-card",
         {{"model.pt", fixture("plain_sd.pt")}},
         0,
         {"rename  add 'module.' to 9 keys: conv.weight -> module.conv.weight", "wrote ddp.pt"}},
        {"ckptscope convert train.ckpt -o model.safetensors --select model --strip-prefix module.",
         {{"train.ckpt", fixture("train_ckpt.pt")}},
         0,
         {"rename  strip 'module.' from 9 keys: model/module.conv.weight -> conv.weight", "wrote model.safetensors"}},
        {"ckptscope convert ckpt.pt -o fixed.pt --map-location cuda:1=cuda:0 --drop optimizer --dry-run",
         {{"ckpt.pt", fixture("train_ckpt.pt")}},
         0,
         {"drop    optimizer: dict (2 entries) dropped", "dry run: nothing written"}},
        {"ckptscope convert model.pt -o llama-hf/ --shard-size 5GB --format safetensors",
         {{"model.pt", fixture("plain_sd.pt")}},
         0,
         {"wrote llama-hf/: 1 shard, 9 tensors"}},
        {"ckptscope convert train.pt -o train-dcp/ --format dcp",
         {{"train.pt", fixture("train_ckpt.pt")}},
         0,
         {"wrote train-dcp/: a single-rank DCP folder"}},
        {"ckptscope convert pytorch_model.bin.index.json -o model.safetensors --strip-prefix model.",
         {{".", setFixture("hf_bin")}},
         0,
         {"wrote model.safetensors"}},
        {"ckptscope convert ds_run/ -o model.pt", {{"ds_run", setFixture("zero2_complete")}}, 0, {"wrote model.pt"}},
        // testload --help
        {"ckptscope testload model.pt --device cuda:0 --select model --json | jq .other_devices_touched",
         {model},
         0,
         {"false"}},
        {"ckptscope testload ddp.pt --ddp-ranks 4", {ddp}, 0, {"cuda:0 peaks at 4 x (context"}},
        // diff --help
        {"ckptscope diff epoch10.pt epoch20.pt",
         {{"epoch10.pt", diffFixture("base.pt")}, {"epoch20.pt", diffFixture("epoch20.pt")}},
         1,
         {"Differ: ", "epoch: 10 -> 20"}},
        {"ckptscope diff model.safetensors https://example.org/model.safetensors",
         {{"model.safetensors", fixture("model.safetensors")}},
         0,
         {"Equal: "},
         true},
        {"ckptscope diff fp32.pt bf16.pt --rtol 1e-2 --atol 1e-3 --summary",
         {{"fp32.pt", diffFixture("base.pt")}, {"bf16.pt", diffFixture("bf16.pt")}},
         1,
         {"within rtol 0.01, atol 0.001"}},
        {"ckptscope diff ddp.pt model.safetensors --select state_dict: --strict",
         {ddp, exported},
         1,
         {"Same weights: "}},
        {"ckptscope diff llama-shards/ consolidated.safetensors",
         {{"llama-shards", setFixture("hf_st")},
          {"consolidated.safetensors", "run:convert llama-shards/ -o consolidated.safetensors"}},
         0,
         {"Hugging Face sharded checkpoint"}},
    };
}

// The command lines the docs show as examples, each with where it is shown: the README's ```sh
// blocks, the man page's EXAMPLES and each command's --help. Comments after them are dropped.
std::map<std::string, std::string> documentedExamples()
{
    std::map<std::string, std::string> found;
    const auto strip = [](std::string l) {
        static const std::regex comment(R"((\s+#.*|\s{2,}\(.*\))$)");
        l = std::regex_replace(l, comment, "");
        while (!l.empty() && l.back() == ' ') {
            l.pop_back();
        }
        return l;
    };
    bool inSh = false;
    for (const auto& l : lines(readText(source("README.md")))) {
        if (l.starts_with("```")) {
            inSh = !inSh && l == "```sh";
            continue;
        }
        if (inSh && l.starts_with("ckptscope ")) {
            found.emplace(strip(l), "README.md");
        }
    }
    const std::string man = readText(source("packaging/ckptscope.1"));
    const auto from = man.find(".SH EXAMPLES\n.nf\n");
    const auto to = man.find(".fi\n", from);
    if (from != std::string::npos && to != std::string::npos) {
        for (const auto& l : lines(man.substr(from, to - from))) {
            if (l.starts_with("ckptscope ")) {
                found.emplace(strip(unroff(l)), "the man page");
            }
        }
    }
    for (const auto& c : ckpt::cli::describeCommands()) {
        for (const auto& l : lines(c.footer)) {
            if (l.starts_with("  ckptscope ")) {
                found.emplace(strip(l.substr(2)), c.name + " --help");
            }
        }
    }
    return found;
}

QString qs(const std::string& s)
{
    return QString::fromStdString(s);
}

struct Shell {
    int rc = -1;
    std::string out;
};

Shell shell(const std::string& command, const QString& dir, const QProcessEnvironment& env)
{
    QProcess p;
    p.setWorkingDirectory(dir);
    p.setProcessEnvironment(env);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral("bash"),
            {QStringLiteral("-o"), QStringLiteral("pipefail"), QStringLiteral("-c"), qs(command)});
    if (!p.waitForFinished(120000)) {
        p.kill();
        p.waitForFinished();
        return {-1, "timed out"};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAll().toStdString()};
}

bool copyTree(const QString& from, const QString& to)
{
    const QFileInfo info(from);
    if (!info.isDir()) {
        QDir().mkpath(QFileInfo(to).path());
        QFile::remove(to);
        return QFile::copy(from, to);
    }
    QDir().mkpath(to);
    for (const auto& e : QDir(from).entryInfoList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot)) {
        if (!copyTree(e.filePath(), to + QLatin1Char('/') + e.fileName())) {
            return false;
        }
    }
    return true;
}

}  // namespace

class TestDocs : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { m_commands = ckpt::cli::describeCommands(); }

    // packaging/ holds the man page's synopsis and option lists and the bash completion as they
    // render from the definitions; CKPTSCOPE_UPDATE_DOCS=1 writes them there.
    void generatedDocsAreCurrent()
    {
        const std::string completionPath = source("packaging/ckptscope.bash-completion");
        const std::string manPath = source("packaging/ckptscope.1");
        const std::string completion = docs::bashCompletion(m_commands);
        const std::string man = readText(manPath);
        std::string wantMan = man;
        QVERIFY2(docs::replaceRegion(wantMan, docs::kSynopsisBegin, docs::kSynopsisEnd, docs::manSynopsis(m_commands)),
                 "the man page lacks its generated SYNOPSIS markers");
        QVERIFY2(docs::replaceRegion(wantMan, docs::kOptionsBegin, docs::kOptionsEnd, docs::manOptions(m_commands)),
                 "the man page lacks its generated OPTIONS markers");
        if (qEnvironmentVariableIntValue("CKPTSCOPE_UPDATE_DOCS") == 1) {
            writeText(completionPath, completion);
            writeText(manPath, wantMan);
        }
        const char* hint = "; CKPTSCOPE_UPDATE_DOCS=1 build/tests/cli/tst_docs generatedDocsAreCurrent rewrites it";
        QVERIFY2(readText(completionPath) == completion,
                 (completionPath + " is not what the definitions render" + hint).c_str());
        QVERIFY2(readText(manPath) == wantMan,
                 (manPath + "'s SYNOPSIS or OPTIONS is not what the definitions render" + hint).c_str());

        // And the renderings miss nothing: every option of every command is in each.
        const std::string synopsis = docs::region(wantMan, docs::kSynopsisBegin, docs::kSynopsisEnd);
        const std::string options = docs::region(wantMan, docs::kOptionsBegin, docs::kOptionsEnd);
        for (const auto& c : m_commands) {
            const auto section = options.substr(options.find(".SS ckptscope " + c.name + "\n"));
            const auto line = lines(synopsis.substr(synopsis.find(".B ckptscope " + c.name + "\n")))[1];
            for (const auto& o : c.options) {
                for (const auto& n : o.names) {
                    QVERIFY2(section.find(o.positional ? docs::italic(n) : docs::bold(n)) != std::string::npos,
                             (c.name + " " + n + ": not in the man page's OPTIONS").c_str());
                    if (!o.positional) {
                        QVERIFY2(mentions(completion, n), (c.name + " " + n + ": not in the completion").c_str());
                    }
                }
                QVERIFY2(line.find(o.positional ? docs::italic(o.names.front()) : docs::bold(o.names.front())) !=
                             std::string::npos,
                         (c.name + " " + o.names.front() + ": not in the man page's SYNOPSIS").c_str());
            }
        }
    }

    // The completion works in bash: after each command, `--` offers every option it has, and an
    // option with a closed set of values offers exactly those. bash-completion's helpers are
    // stood in for (the script needs nothing else of them).
    void completionOffersEveryOption()
    {
        // (Plain literals: moc misreads raw strings that hold quotes.)
        std::string script = "_init_completion() { words=(\"${COMP_WORDS[@]}\"); cword=$COMP_CWORD;\n"
                             "  cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; }\n"
                             "_filedir() { COMPREPLY=(FILES); }\n"
                             "complete() { :; }\n"
                             "source '" +
                             source("packaging/ckptscope.bash-completion") +
                             "'\n"
                             "ask() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _ckptscope; "
                             "echo \"$2|${COMPREPLY[*]}\"; }\n";
        for (const auto& c : m_commands) {
            script += "ask ckptscope " + c.name + " --\n";
            for (const auto& o : c.options) {
                if (!o.choices.empty()) {
                    script += "ask ckptscope " + c.name + " " + o.names.back() + " ''\n";
                }
            }
        }
        QProcess bash;
        bash.start(QStringLiteral("bash"), {QStringLiteral("-c"), qs(script)});
        QVERIFY(bash.waitForFinished(30000));
        QCOMPARE(bash.exitCode(), 0);
        const auto answers = lines(bash.readAllStandardOutput().toStdString());
        std::size_t at = 0;
        for (const auto& c : m_commands) {
            QVERIFY(at < answers.size());
            const auto offered = matches(answers[at++], std::regex(R"(-[^\s|]+)"));
            for (const auto& o : c.options) {
                for (const auto& n : o.names) {
                    QVERIFY2(o.positional || !n.starts_with("--") || offered.contains(n),
                             (c.name + " -- does not offer " + n).c_str());
                }
            }
            for (const auto& o : c.options) {
                if (!o.choices.empty()) {
                    QVERIFY(at < answers.size());
                    const std::string& a = answers[at++];
                    const std::set<std::string> got = matches(a.substr(a.find('|') + 1), std::regex(R"([^ ]+)"));
                    const std::set<std::string> choices(o.choices.begin(), o.choices.end());
                    QVERIFY2(got == choices, (c.name + " " + o.names.back() + " offers " + listed(got)).c_str());
                }
            }
        }
    }

    // Each --help is CLI11's rendering of the definition: every option in it, -q included, and a
    // command that takes several files says FILE... in its usage line.
    void everyHelpListsEveryOption()
    {
        const auto top = ckpt::test::ckptscope({"--help"});
        for (const auto& c : m_commands) {
            QVERIFY2(top.out.find("  " + c.name + " ") != std::string::npos, c.name.c_str());
            const auto help = ckpt::test::ckptscope({c.name, "--help"});
            QCOMPARE(help.rc, 0);
            for (const auto& o : c.options) {
                for (const auto& n : o.names) {
                    QVERIFY2(mentions(help.out, n), (c.name + " --help lacks " + n).c_str());
                }
                if (o.positional && o.repeatable) {
                    QVERIFY2(help.out.find(" " + o.names.front() + "...\n") != std::string::npos,
                             (c.name + " --help: " + lines(help.out)[1]).c_str());
                }
            }
            QVERIFY2(c.find("-q") != nullptr && c.find("--quiet") != nullptr, c.name.c_str());
        }
        // check and convert take several files (cli::run hands them over one at a time).
        for (const char* several : {"inspect", "check", "convert"}) {
            const auto* file = std::find_if(m_commands.begin(), m_commands.end(), [&](const auto& c) {
                                   return c.name == several;
                               })->find("FILE");
            QVERIFY(file != nullptr && file->repeatable);
        }
    }

    // The README's command-line synopsis names only options its command has, and the README
    // mentions every option of every command somewhere.
    void readmeSynopsisAndOptions()
    {
        const std::string readme = readText(source("README.md"));
        const auto at = readme.find("\n## Command line\n");
        QVERIFY(at != std::string::npos);
        const auto open = readme.find("```\n", at);
        const auto close = readme.find("```\n", open + 4);
        const ckpt::cli::CommandDef* current = nullptr;
        std::set<std::string> seen;
        for (const auto& l : lines(readme.substr(open + 4, close - open - 4))) {
            if (l.starts_with("ckptscope ")) {
                const auto name = l.substr(10, l.find(' ', 10) - 10);
                const auto it =
                    std::find_if(m_commands.begin(), m_commands.end(), [&](const auto& c) { return c.name == name; });
                current = it == m_commands.end() ? nullptr : &*it;
            }
            if (current == nullptr) {
                continue;
            }
            for (const auto& opt : matches(l, std::regex(R"((^|[\s\[|])(--?[a-z][a-z0-9-]*))"), 2)) {
                QVERIFY2(
                    current->find(opt) != nullptr,
                    ("README's synopsis gives `" + current->name + "` the option " + opt + ", which it lacks").c_str());
                seen.insert(current->name + " " + opt);
            }
        }
        for (const auto& c : m_commands) {
            for (const auto& o : c.options) {
                if (!o.positional && o.names.back() != "--help") {
                    QVERIFY2(mentions(readme, o.names.back()),
                             ("README never mentions " + c.name + " " + o.names.back()).c_str());
                }
            }
        }
    }

    // An option the README or the man page names exists (in some command), unless it is another
    // program's.
    void docsNameOnlyRealOptions()
    {
        std::set<std::string> real{"--help", "--version"};
        for (const auto& c : m_commands) {
            for (const auto& o : c.options) {
                real.insert(o.names.begin(), o.names.end());
            }
        }
        // Other programs' options the docs show: take_screenshots.py's.
        const std::set<std::string> others{"--fake-gpus"};
        for (const auto& [doc, text] : {std::pair<std::string, std::string>{"README.md", readText(source("README.md"))},
                                        {"the man page", unroff(readText(source("packaging/ckptscope.1")))}}) {
            std::set<std::string> unknown;
            for (const auto& opt : matches(text, std::regex("(^|[\\s`(\\[|'\"])(--[a-z][a-z0-9-]*[a-z0-9])"), 2)) {
                if (!real.contains(opt) && !others.contains(opt)) {
                    unknown.insert(opt);
                }
            }
            QVERIFY2(unknown.empty(), (doc + " names options no command has: " + listed(unknown)).c_str());
        }
    }

    // README's table and docs/findings.md describe exactly the program's finding codes, and every
    // code the sources write is one of them.
    void findingCodes()
    {
        const std::set<std::string> program(ckpt::diagnose::kFindingCodes.begin(), ckpt::diagnose::kFindingCodes.end());
        QCOMPARE(program.size(), ckpt::diagnose::kFindingCodes.size());
        const std::string readme = readText(source("README.md"));
        std::set<std::string> table;
        for (const auto& l : lines(readme)) {
            static const std::regex row(R"(^\| (`[a-z0-9-]+`(, `[a-z0-9-]+`)*) \|)");
            std::smatch m;
            if (std::regex_search(l, m, row)) {
                const auto codes = matches(m[1].str(), std::regex("`([a-z0-9-]+)`"), 1);
                table.insert(codes.begin(), codes.end());
            }
        }
        table.erase("code");
        std::set<std::string> missing;
        std::set_difference(program.begin(), program.end(), table.begin(), table.end(),
                            std::inserter(missing, missing.begin()));
        QVERIFY2(missing.empty(), ("README's findings table lacks " + listed(missing)).c_str());
        std::set<std::string> extra;
        std::set_difference(table.begin(), table.end(), program.begin(), program.end(),
                            std::inserter(extra, extra.begin()));
        QVERIFY2(extra.empty(), ("README's findings table names codes the program lacks: " + listed(extra)).c_str());

        // docs/findings.md: a heading of its own for each (or a bullet, for --against's), each
        // heading on a line of its own.
        const std::string findings = readText(source("docs/findings.md"));
        const auto documented = matches(findings, std::regex(R"((^|\n)(### |- )`([a-z0-9-]+)` \()"), 3);
        std::set<std::string> undocumented;
        std::set_difference(program.begin(), program.end(), documented.begin(), documented.end(),
                            std::inserter(undocumented, undocumented.begin()));
        QVERIFY2(undocumented.empty(), ("docs/findings.md has no entry for " + listed(undocumented)).c_str());
        const auto runOn = matches(findings, std::regex(R"([^\n]###)"));
        QVERIFY2(runOn.empty(), ("docs/findings.md has a heading inside a paragraph: " + listed(runOn)).c_str());

        // The sources: every kebab-case literal in the code that makes findings is a code, or one
        // of the few other identifiers those files hold.
        const std::set<std::string> notCodes{"deepspeed-zero", "fsdp-ranks"};  // set kinds (sharded/formats.cpp)
        std::set<std::string> unlisted;
        for (const char* dir : {"core/diagnose", "core/sharded", "core/checkpoint"}) {
            QDirIterator it(qs(source(dir)), {QStringLiteral("*.cpp"), QStringLiteral("*.h")}, QDir::Files);
            while (it.hasNext()) {
                const std::string path = it.next().toStdString();
                const std::string text = readText(path);
                // Only files that make findings: checkpoint/ holds format names too.
                if (text.find("Finding") == std::string::npos && text.find("Code =") == std::string::npos) {
                    continue;
                }
                for (const auto& code : matches(text, std::regex(R"re("([a-z0-9]+(-[a-z0-9]+)+)")re"), 1)) {
                    if (!program.contains(code) && !notCodes.contains(code)) {
                        unlisted.insert(code + " (" + QFileInfo(qs(path)).fileName().toStdString() + ")");
                    }
                }
            }
        }
        QVERIFY2(unlisted.empty(),
                 ("finding codes the sources write that diagnose/codes.h lacks: " + listed(unlisted)).c_str());
    }

    // The environment variables: the man page names every one the program reads, and every
    // CKPTSCOPE_ variable a doc names is read somewhere (the program, or the scripts and tests
    // for those about building and testing).
    void environmentVariables()
    {
        // What the program reads: the names in the sources that read the environment.
        std::set<std::string> program;
        const QRegularExpression reads(QStringLiteral(R"(getenv|qEnvironmentVariable|qgetenv)"));
        for (const char* dir : {"core", "app", "ui"}) {
            QDirIterator it(qs(source(dir)), {QStringLiteral("*.cpp"), QStringLiteral("*.h")}, QDir::Files,
                            QDirIterator::Subdirectories);
            while (it.hasNext()) {
                const std::string text = readText(it.next().toStdString());
                if (!reads.match(qs(text)).hasMatch()) {
                    continue;
                }
                for (const auto& name : matches(text, std::regex(R"re("([A-Z][A-Z0-9_]{2,})")re"), 1)) {
                    program.insert(name);
                }
            }
        }
        // Not variables: a device's name, and the names of options' values (--header HEADER) in
        // the files that define them beside reading the environment.
        program.erase("CPU");
        for (const auto& c : m_commands) {
            for (const auto& o : c.options) {
                program.erase(o.value);
            }
        }
        QVERIFY2(program.contains("CKPTSCOPE_CUDA_BUFFERS") && program.contains("HF_TOKEN"), listed(program).c_str());
        // Read by the libraries the program uses, as the man page says.
        const std::set<std::string> libraries{"http_proxy", "https_proxy", "no_proxy", "CUDA_DEVICE_ORDER"};

        const std::string man = unroff(readText(source("packaging/ckptscope.1")));
        const auto env =
            man.substr(man.find(".SH ENVIRONMENT"), man.find(".SH SEE ALSO") - man.find(".SH ENVIRONMENT"));
        const auto named = matches(env, std::regex(R"(\.(?:B|TP\n\.B) ([^\n]+))"), 1);
        std::set<std::string> inMan;
        for (const auto& l : named) {
            const auto names = matches(l, std::regex(R"([A-Za-z][A-Za-z0-9_]*_[A-Za-z0-9_]+|[A-Z]{4,})"));
            inMan.insert(names.begin(), names.end());
        }
        std::set<std::string> unnamed;
        std::set_difference(program.begin(), program.end(), inMan.begin(), inMan.end(),
                            std::inserter(unnamed, unnamed.begin()));
        QVERIFY2(unnamed.empty(), ("the man page's ENVIRONMENT lacks " + listed(unnamed)).c_str());
        std::set<std::string> stale;
        for (const auto& n : inMan) {
            if (!program.contains(n) && !libraries.contains(n)) {
                stale.insert(n);
            }
        }
        QVERIFY2(stale.empty(), ("the man page's ENVIRONMENT names what nothing reads: " + listed(stale)).c_str());

        // Every CKPTSCOPE_ name in the docs and the help is read somewhere in the tree.
        std::string tree;
        for (const char* dir : {"core", "app", "ui", "scripts", "tests", "bench", ".ci"}) {
            QDirIterator it(qs(source(dir)), QDir::Files, QDirIterator::Subdirectories);
            while (it.hasNext()) {
                const QString path = it.next();
                if (!path.contains(QStringLiteral("/tst_docs.cpp"))) {
                    tree += readText(path.toStdString());
                }
            }
        }
        tree += readText(source("CMakeLists.txt")) + readText(source("CMakePresets.json"));
        std::string documents = readText(source("README.md")) + man + readText(source("docs/design.md")) +
                                readText(source("docs/findings.md"));
        for (const auto& c : m_commands) {
            documents += c.footer + c.description;
            for (const auto& o : c.options) {
                documents += o.help;
            }
        }
        std::set<std::string> unread;
        for (const auto& name : matches(documents, std::regex(R"(CKPTSCOPE_[A-Z0-9_]*[A-Z0-9])"))) {
            const bool read = program.contains(name) || tree.find("getenv(\"" + name) != std::string::npos ||
                              tree.find("qEnvironmentVariable(\"" + name) != std::string::npos ||
                              tree.find("qEnvironmentVariableIntValue(\"" + name) != std::string::npos ||
                              tree.find("$" + name) != std::string::npos ||
                              tree.find("${" + name) != std::string::npos ||
                              tree.find("ENV{" + name) != std::string::npos ||
                              std::regex_search(tree, std::regex("option\\(" + name + "\\b|\\b" + name + "\\s*[:=]"));
            if (!read) {
                unread.insert(name);
            }
        }
        QVERIFY2(unread.empty(), ("the docs name variables nothing reads: " + listed(unread)).c_str());
    }

    // Every remote form the program takes (remote::kRemotePrefixes, what isRemote tests) is named
    // in the help of each command's input, and in the man page's "Remote files", which names every
    // command (issue 41 added s3:// and testload's download after issue 44; neither doc said so).
    void remoteInputsAreDocumented()
    {
        const std::string man = readText(source("packaging/ckptscope.1"));
        const auto at = man.find(".SS Remote files\n");
        QVERIFY(at != std::string::npos);
        const std::string section = man.substr(at, man.find("\n.S", at + 1) - at);
        for (const auto prefix : ckpt::remote::kRemotePrefixes) {
            QVERIFY(ckpt::remote::isRemote(std::string(prefix) + "host/file.pt"));
            QVERIFY2(section.find(prefix) != std::string::npos,
                     ("the man page's Remote files does not name " + std::string(prefix)).c_str());
            for (const auto& c : m_commands) {
                const auto input = std::find_if(c.options.begin(), c.options.end(),
                                                [](const auto& o) { return o.positional; });  // FILE (diff: A)
                QVERIFY(input != c.options.end());
                QVERIFY2(
                    input->help.find(prefix) != std::string::npos,
                    (c.name + " --help: " + input->names.front() + " does not name " + std::string(prefix)).c_str());
            }
        }
        for (const auto& c : m_commands) {
            QVERIFY2(section.find("\\fB" + c.name + "\\fR") != std::string::npos ||
                         section.find("\\fB" + c.name + " ") != std::string::npos,
                     ("the man page's Remote files does not say what " + c.name + " does with one").c_str());
        }
    }

    // No text the program shows cites a file of this repository (docs/format.md, the shared notes):
    // users of the package have none of them (issue 39: a finding cited "docs/format.md §14").
    // Comments may; Qt resource paths (":/guide/README.md") are no citation.
    void messagesCiteNoRepositoryFile()
    {
        std::vector<std::string> cited;
        const std::regex citation(R"((^|[^:])(docs/|[A-Za-z_]+\.md\b)|\xC2\xA7)");
        for (const char* dir : {"core", "app", "ui"}) {
            QDirIterator it(qs(source(dir)), {QStringLiteral("*.cpp"), QStringLiteral("*.h")}, QDir::Files,
                            QDirIterator::Subdirectories);
            while (it.hasNext()) {
                const QString path = it.next();
                for (const auto& literal : stringLiterals(readText(path.toStdString()))) {
                    if (!literal.starts_with(":/") && std::regex_search(literal, citation)) {
                        cited.push_back(QDir(qs(source(""))).relativeFilePath(path).toStdString() + ": " + literal);
                    }
                }
            }
        }
        std::string all;
        for (const auto& c : cited) {
            all += "\n  " + c;
        }
        QVERIFY2(cited.empty(), ("text the program shows cites a file users lack:" + all).c_str());
    }

    // Every example the docs show is one of these, and each of these is shown.
    void everyExampleIsKnown()
    {
        const auto documented = documentedExamples();
        std::set<std::string> known;
        for (const auto& e : examples()) {
            QVERIFY2(known.insert(e.command).second, ("listed twice: " + e.command).c_str());
        }
        std::set<std::string> unknown;
        for (const auto& [command, where] : documented) {
            if (!known.contains(command)) {
                unknown.insert(where + ": " + command);
            }
        }
        QVERIFY2(
            unknown.empty(),
            ("examples in the docs that tst_docs does not run (add them to examples()): " + listed(unknown)).c_str());
        std::set<std::string> stale;
        for (const auto& k : known) {
            if (!documented.contains(k)) {
                stale.insert(k);
            }
        }
        QVERIFY2(stale.empty(), ("examples no doc shows any more: " + listed(stale)).c_str());
        QVERIFY(documented.size() > 40);
    }

    void examplesRun_data()
    {
        QTest::addColumn<int>("index");
        const auto all = examples();
        for (std::size_t i = 0; i < all.size(); ++i) {
            QTest::newRow(all[i].command.c_str()) << static_cast<int>(i);
        }
    }

    // Each example, in a fresh folder holding what it names, with the exit code and the words its
    // docs promise. GPUs are the tests' fake driver (two of 16 GiB); hf:// reads $HF_ENDPOINT, and
    // https://example.org is served by nginx on loopback.
    void examplesRun()
    {
        QFETCH(int, index);
        const Example e = examples()[static_cast<std::size_t>(index)];
        std::string command = e.command;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("PATH"), QStringLiteral(CKPTSCOPE_CLI_DIR ":") + env.value(QStringLiteral("PATH")));
        env.insert(QStringLiteral("CKPTSCOPE_CUDA_LIBRARY"), QStringLiteral(FAKE_CUDA_PATH));
        env.insert(QStringLiteral("CKPTSCOPE_NVML_LIBRARY"), QStringLiteral(FAKE_NVML_PATH));
        env.insert(QStringLiteral("CKPTSCOPE_CUDA_ENGINE"), QStringLiteral(CKPTSCOPE_TEST_ENGINE));
        env.insert(QStringLiteral("FAKE_GPU_STATE"), m_machine.filePath(QStringLiteral("gpu.state")));
        env.insert(QStringLiteral("HF_HOME"), m_machine.filePath(QStringLiteral("hf-home")));
        env.remove(QStringLiteral("HF_TOKEN"));
        env.remove(QStringLiteral("CUDA_VISIBLE_DEVICES"));
        if (e.remote) {
            if (!serve()) {
                QSKIP("no nginx: the remote examples are not run");
            }
            env.insert(QStringLiteral("HF_ENDPOINT"), m_nginx->url(QString()));
            const std::string site = "https://example.org";
            if (const auto at = command.find(site); at != std::string::npos) {
                command.replace(at, site.size(), m_nginx->url(QStringLiteral("/site")).toStdString());
            }
        }
        QTemporaryDir dir;
        for (const auto& f : e.files) {
            const QString target = dir.filePath(qs(f.name));
            if (f.from.starts_with("text:")) {
                writeText(target.toStdString(), f.from.substr(5));
            } else if (f.from.starts_with("run:")) {
                const auto made = shell("ckptscope " + f.from.substr(4), dir.path(), env);
                QVERIFY2(made.rc == 0, (f.from + ": " + made.out).c_str());
            } else {
                QVERIFY2(copyTree(qs(f.from), target), (f.from + " -> " + f.name).c_str());
            }
        }
        const auto r = shell(command, dir.path(), env);
        const std::string said = "\n" + command + " exited " + std::to_string(r.rc) + ":\n" + r.out;
        QVERIFY2(r.rc == e.rc, ("the docs promise exit " + std::to_string(e.rc) + said).c_str());
        for (const auto& w : e.words) {
            QVERIFY2(r.out.find(w) != std::string::npos, ("the docs promise '" + w + "'" + said).c_str());
        }
    }

private:
    // nginx on loopback serving what the remote examples name: the Hub's layout (resolve redirects
    // to a CDN, the API's listing of a repository) and https://example.org's files under /site.
    bool serve()
    {
        if (m_nginx) {
            return true;
        }
        if (ckpt::test::nginxPath().isEmpty()) {
            return false;
        }
        const QString root = m_machine.filePath(QStringLiteral("served"));
        const auto link = [&](const std::string& from, const QString& to) {
            QDir().mkpath(QFileInfo(root + QLatin1Char('/') + to).path());
            return QFile::link(qs(from), root + QLatin1Char('/') + to);
        };
        const auto api = [&](const QString& repo, const QStringList& files) {
            QStringList siblings;
            for (const auto& f : files) {
                siblings << QStringLiteral("{\"rfilename\": \"%1\"}").arg(f);
            }
            const QString path = root + QStringLiteral("/api/models/") + repo + QStringLiteral("/revision/main");
            QDir().mkpath(QFileInfo(path).path());
            QFile out(path);
            return out.open(QIODevice::WriteOnly) && out.write(QStringLiteral("{\"id\": \"%1\", \"siblings\": [%2]}")
                                                                   .arg(repo, siblings.join(QStringLiteral(", ")))
                                                                   .toUtf8()) > 0;
        };
        const QString hfSet = qs(setFixture("hf_st"));
        bool ok =
            link(fixture("plain_sd.pt"), QStringLiteral("cdn/openai-community/gpt2/main/pytorch_model.bin")) &&
            link(fixture("model.safetensors"), QStringLiteral("cdn/openai-community/gpt2/main/model.safetensors")) &&
            api(QStringLiteral("openai-community/gpt2"),
                {QStringLiteral("config.json"), QStringLiteral("model.safetensors"),
                 QStringLiteral("pytorch_model.bin")}) &&
            link(hfSet.toStdString(), QStringLiteral("cdn/meta-llama/Llama-3.1-8B/main")) &&
            api(QStringLiteral("meta-llama/Llama-3.1-8B"), QDir(hfSet).entryList(QDir::Files)) &&
            link(fixture("model.safetensors"), QStringLiteral("cdn/my-org/my-model/v2/model.safetensors")) &&
            link(fixture("plain_sd.pt"), QStringLiteral("cdn/ORG/REPO/main/pytorch_model.bin")) &&
            link(fixture("lightning.pt"), QStringLiteral("site/runs/last.ckpt")) &&
            link(fixture("lightning.pt"), QStringLiteral("site/last.ckpt")) &&
            link(fixture("model.safetensors"), QStringLiteral("site/model.safetensors"));
        if (!ok) {
            return false;
        }
        m_nginx = std::make_unique<ckpt::test::LoopbackServer>();
        if (!m_nginx->start(ckpt::test::scriptPath("nginx_server.py"), {root})) {
            m_nginx.reset();
            return false;
        }
        return true;
    }

    std::vector<ckpt::cli::CommandDef> m_commands;
    QTemporaryDir m_machine;
    std::unique_ptr<ckpt::test::LoopbackServer> m_nginx;
};

QTEST_GUILESS_MAIN(TestDocs)
#include "tst_docs.moc"
