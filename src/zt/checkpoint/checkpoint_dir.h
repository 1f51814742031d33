// A checkpoint folder on disk: DeepSpeed's names (reference §4) with safetensors and JSON in
// place of pickles, and the protocol that keeps it loadable whatever moment a crash hits.
//
//   DIR/latest                                       the tag text, replaced last
//   DIR/<tag>/mp_rank_00_model_states.json           rank 0: counters, scheduler, scaler, config,
//                                                    model, client state, file checksums
//   DIR/<tag>/zero_pp_rank_{R}_mp_rank_00_optim_states.safetensors
//                                                    rank R: its chunk of every unit's fp32
//                                                    master weights and optimizer state (with
//                                                    pipeline stages, mp_rank_{S:02d} holds the
//                                                    units of stage S, whose number the
//                                                    metadata gives each unit as "stage"; with
//                                                    tensor parallelism T, mp_rank_{S*T+t:02d}
//                                                    those of tensor rank t)
//
// A save writes into DIR/.<tag>.partial/ (every file atomically, through core/file_io.h), and
// rank 0 renames the finished folder to DIR/<tag> (exchanging it with an older one of the same
// name) and then replaces `latest`: a reader that follows `latest` only ever finds a complete
// checkpoint. A partial folder left by a crash is removed by the next save of that tag.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/checkpoint/safetensors.h"
#include "zt/core/status.h"

namespace zt::ckpt {

constexpr const char* kLatestFile = "latest";
constexpr const char* kModelStatesFile = "mp_rank_00_model_states.json";
constexpr const char* kFormatName = "zerotrain-checkpoint";
// Format versions: 1, every checkpoint saved without tensor parallelism; 2, one saved with it
// (tensor_parallel_size and the units' "tensor_parallel" records, checkpoint/unit_layout.h), so
// that a reader predating them refuses it by its version instead of misreading it.
constexpr int kFormatVersionPlain = 1;
constexpr int kFormatVersionTensorParallel = 2;
constexpr int kFormatVersion = kFormatVersionTensorParallel;  // the newest this reader reads

// Data-parallel rank R's shard of model-parallel rank M (the pipeline stage S, or S * T + t with
// tensor parallelism T; 0 with neither): DeepSpeed's
// zero_pp_rank_{R}_mp_rank_{M:02d}_optim_states name, as safetensors.
std::string shard_file_name(int rank, int mp_rank = 0);

// Where a shard belongs besides its data-parallel rank.
struct ShardPlace {
  int stage = 0;
  int tensor_rank = 0, tensor_size = 1;
  int mp_rank() const { return stage * tensor_size + tensor_rank; }
};
std::string tag_path(const std::string& dir, const std::string& tag);
std::string partial_path(const std::string& dir, const std::string& tag);

// A tag must be one plain folder name (no '/', not "." or "..", no leading '.', printable).
Status tag_check(const std::string& tag);

// The tag `latest` names; nullopt when DIR has no `latest` file (nothing saved yet).
Result<std::optional<std::string>> latest_read(const std::string& dir);
Status latest_write(const std::string& dir, const std::string& tag);

// Rank 0, before any rank writes: a fresh, empty partial folder for `tag` (and whatever
// unfinished folders and temporaries earlier crashed saves left in DIR are removed).
Status partial_prepare(const std::string& dir, const std::string& tag);
// Rank R's shard (`tensors`) into the partial folder of `tag`, with the shard's safetensors
// metadata (format, rank, world size, stage; the tensor-parallel rank and size when T > 1).
Result<WrittenFile> shard_write(const std::string& dir, const std::string& tag, int rank,
                                int world, const std::vector<TensorToWrite>& tensors,
                                const ShardPlace& place = {});
// Rank 0, when a save failed: removes its partial folder (a full disk gets its space back).
void partial_discard(const std::string& dir, const std::string& tag);
// Rank 0, after every rank's files and the metadata are in the partial folder: syncs it, moves
// it to DIR/<tag> (replacing an older folder of that name only once the new one is in place) and
// syncs DIR.
Status partial_publish(const std::string& dir, const std::string& tag);

// The tag to read: `tag` when given, else the one `latest` names (an error when there is none).
Result<std::string> tag_resolve(const std::string& dir, const std::string& tag);
// DIR/<tag>/mp_rank_00_model_states.json, parsed and checked to be ZeroTrain's.
Result<nlohmann::json> metadata_read(const std::string& tag_dir);
// Every file the metadata lists is there, has its size and its checksum; the first that does
// not is named.
Status checkpoint_verify(const std::string& tag_dir, const nlohmann::json& meta);

// Rank 0, last: writes the metadata (with `files` added) into the partial folder, publishes
// the folder, replaces `latest`, and prunes to the newest keep_last tags (0: keeps all).
Status checkpoint_finish(const std::string& dir, const std::string& tag, nlohmann::json meta,
                         const nlohmann::json& files, int keep_last);

// Asynchronous saves (--save-async) agree through the partial folder instead of collectives
// (the training loop owns the communicator meanwhile): each rank leaves a small note when its
// shard is written (or failed), and rank 0 waits for all of them before checkpoint_finish.
Status shard_note_write(const std::string& dir, const std::string& tag, int rank,
                        const Result<struct WrittenFile>& written);
// The `files` object of the metadata once every rank's note is there; an error naming the rank
// that failed or that left no note within `timeout_s`.
Result<nlohmann::json> shard_notes_wait(const std::string& dir, const std::string& tag, int world,
                                        double timeout_s);

// The complete checkpoints in DIR (folders holding the metadata file), oldest step first.
struct TagInfo {
  std::string tag;
  int64_t global_steps = 0;
};
Result<std::vector<TagInfo>> tags_list(const std::string& dir);
// Deletes all but the newest `keep` complete tags (never the one `latest` names).
Status tags_prune(const std::string& dir, int keep);

}  // namespace zt::ckpt
