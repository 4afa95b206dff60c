#pragma once
// TensorBoard: event files that TensorBoard reads, and the Keras callback that writes them.
//
//   model.fit(x, y, {.epochs = 10, .validation_data = {{x_val, y_val}},
//                    .callbacks = {callbacks::TensorBoard({.log_dir = "logs",
//                                                          .histogram_freq = 1})}});
//   // then: tensorboard --logdir logs
//
// An event file is a sequence of TFRecords (length, masked CRC-32C of the length, data, masked
// CRC-32C of the data), each holding one serialised Event message; the schema is kept in
// proto/tensorboard_event.proto and encoded with the protobuf library, which stays private to
// libsoma (no protobuf header is reachable from here).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <utility>
#include <vector>

#include "soma/model/callbacks.hpp"
#include "soma/tensor.hpp"

namespace soma::tensorboard {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing.
// crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t size);
inline std::uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }
// TFRecord stores CRCs masked, so that the CRC of data that itself holds CRCs stays well mixed:
// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
std::uint32_t mask_crc(std::uint32_t crc);
std::uint32_t unmask_crc(std::uint32_t masked);
// One TFRecord: uint64 length (little endian), uint32 masked CRC of those 8 bytes, the data,
// uint32 masked CRC of the data.
std::string tfrecord(std::string_view data);

// Whether this libsoma was built with protobuf (else writers throw soma::Error).
bool available();

// Writes one event file, `LOGDIR/events.out.tfevents.TIME.HOST.PID.N[SUFFIX]`
// (TensorFlow's naming; pid and a per-process counter keep two writers opened in the same
// second apart). The first record holds file_version "brain.Event:2". Records are appended with
// every write checked; flush() (or close()) writes them out and fsyncs the file, as TensorFlow's
// EventsWriter does, and a failure (a full disk) throws soma::Error naming the file.
class EventFileWriter {
 public:
  // Creates logdir (and its parents) if needed.
  explicit EventFileWriter(const std::string& logdir, const std::string& filename_suffix = "");
  ~EventFileWriter();
  EventFileWriter(EventFileWriter&&) noexcept;
  EventFileWriter& operator=(EventFileWriter&&) noexcept;
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // A Summary with one simple_value (stored as float32, as TensorBoard's scalar plugin reads).
  void add_scalar(const std::string& tag, double value, std::int64_t step);
  // A HistogramProto of all elements of `values`: min, max, count, sum, sum of squares and
  // `buckets` equal-width buckets between min and max (TensorBoard's own default is 30). Bucket
  // i counts values in [bucket_limit[i-1], bucket_limit[i]), the first starting at min and the
  // last ending at max inclusive; when min == max there is one bucket. Non-finite values throw.
  void add_histogram(const std::string& tag, const Tensor& values, std::int64_t step,
                     int buckets = 30);
  // A graph for TensorBoard's graph dashboard (Event.graph_def holding a GraphDef): one node per
  // entry, `inputs` naming other nodes; `attrs` become string attributes shown beside the node.
  struct GraphNode {
    std::string name, op;
    std::vector<std::string> inputs;
    std::vector<std::pair<std::string, std::string>> attrs;
  };
  void add_graph(const std::vector<GraphNode>& nodes);
  void flush();
  void close();  // flushes and closes; later writes throw
  bool is_open() const;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace soma::tensorboard

namespace soma::callbacks {

struct TensorBoardOptions {
  std::string log_dir = "logs";
  // Every this many epochs, a histogram of each weight (tags such as "dense/kernel"). 0: none.
  int histogram_freq = 0;
  // "epoch": scalars once per epoch ("epoch_loss", ...). "batch" or a number N: also
  // "batch_loss", ... every N training batches, at the global batch index.
  std::variant<std::string, std::int64_t> update_freq = std::string("epoch");
  // Also "epoch_steps_per_second" (training batches per second of the epoch).
  bool write_steps_per_second = false;
  int histogram_buckets = 30;  // soma addition: buckets per weight histogram
  // The model's layer graph in the training run's first event file (Keras' write_graph): one
  // node per layer call, named after the layer, op = its class, inputs = the layers feeding it.
  // A subclassed model without a registered config has no layer graph and writes none.
  bool write_graph = true;
};

// The layer graph write_graph writes, from the model's config (serialization::model_config):
// Sequential as a chain from an "input" node, Functional along its inbound nodes. Empty when the
// model has no config.
std::vector<tensorboard::EventFileWriter::GraphNode> model_graph(const nn::Model& model);

// Keras' TensorBoard callback. Layout as in Keras: `<log_dir>/train` gets the training scalars
// ("epoch_loss", "epoch_accuracy", step = epoch index from 0) and the weight histograms;
// `<log_dir>/validation` gets the "val_*" logs without their prefix ("epoch_loss", ...), so
// TensorBoard draws training and validation curves of one metric on one chart. Every fit()
// starts new event files; each epoch's records are flushed at the epoch's end.
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(TensorBoardOptions options = {});

  void on_train_begin(Logs& logs) override;
  void on_train_end(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_batch_end(std::int64_t batch, Logs& logs) override;
  bool wants_batch_logs(bool training, std::int64_t batch) const override;

  std::string train_dir() const;
  std::string validation_dir() const;
  bool writes_files() const override { return true; }

 private:
  void write_histograms(int epoch);
  tensorboard::EventFileWriter& validation_writer();

  TensorBoardOptions o_;
  std::int64_t batch_every_ = 0;  // 0: epoch-level scalars only
  std::int64_t global_batch_ = 0;
  double epoch_start_ = 0.0;
  // Shared so that the callback stays copyable (fit() copies callbacks passed by value).
  std::shared_ptr<tensorboard::EventFileWriter> train_, validation_;
};

}  // namespace soma::callbacks
