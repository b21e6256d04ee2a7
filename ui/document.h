// One opened file as the window holds it: core's immutable checkpoint plus what the window derives
// from it once, off the GUI thread (lower-cased key paths for the filter). The findings come from a
// second job, so the tree is on screen before diagnose has run over 40k keys.
#pragma once

#include "checkpoint/checkpoint.h"
#include "diagnose/diagnose.h"

#include <memory>
#include <stop_token>
#include <string>
#include <vector>

namespace ckpt::ui {

struct Document {
    CheckpointPtr checkpoint;
    // Per node: its key path, lower-cased (ASCII), for the case-insensitive filter.
    std::vector<std::string> lowerPaths;
    double openSeconds = 0;  // reading + indexing, for the status bar
    // For each storage, the tensors that view it (a tensor's "shares storage with").
    std::vector<std::vector<TensorIndex>> storageTensors;
};

using DocumentPtr = std::shared_ptr<const Document>;

// What diagnose found in one document.
struct Findings {
    std::vector<diagnose::Finding> list;
    std::string error;  // diagnose failed (the file still opened)
    double seconds = 0;
};

using FindingsPtr = std::shared_ptr<const Findings>;

// Reads and indexes `path`. Blocks: call it from a worker.
Expected<DocumentPtr> loadDocument(const std::string& path, std::stop_token stop = {});
// The same over an already-open checkpoint (tests build documents from memory).
std::shared_ptr<Document> makeDocument(CheckpointPtr checkpoint, std::stop_token stop = {});
// Runs diagnose over an indexed document. Blocks: call it from a worker.
FindingsPtr diagnoseDocument(const Document& doc, std::stop_token stop = {});

}  // namespace ckpt::ui
