#include "soma/model/tensorboard.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "internal/atomic_file.hpp"
#include "soma/error.hpp"
#include "soma/model/model.hpp"
#include "soma/model/serialization.hpp"

#ifdef SOMA_HAVE_PROTOBUF
#include "tensorboard_event.pb.h"
#endif

namespace soma::tensorboard {

namespace {

constexpr const char* kNoProtobuf =
    "TensorBoard: soma was built without protobuf; apt-get install libprotobuf-dev "
    "protobuf-compiler (or run scripts/install-deps.sh) and rebuild soma";

// Byte-at-a-time table for the reflected Castagnoli polynomial; event files are small, so the
// slicing-by-8 or SSE4.2 variants would not pay for their code.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFFu));
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t mask_crc(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::uint32_t unmask_crc(std::uint32_t masked) {
  std::uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, mask_crc(crc32c(data)), 4);
  return out;
}

bool available() {
#ifdef SOMA_HAVE_PROTOBUF
  return true;
#else
  return false;
#endif
}

// ---- EventFileWriter ------------------------------------------------------------------------

struct EventFileWriter::Impl {
  std::string path;
  // Appended over the run, as TensorFlow's EventsWriter does: every write is checked, flush()
  // syncs to the disk, and a failure (ENOSPC, EIO) throws at once naming the file. A crash can
  // cut the last record short; TensorBoard's reader stops there (the record's CRC).
  soma::internal::AppendFile file;

  void write_record(const std::string& data) {
    if (!file.is_open()) fail("EventFileWriter", "'", path, "' is closed");
    file.write(tfrecord(data));
  }

#ifdef SOMA_HAVE_PROTOBUF
  void write_event(const pb::Event& e) {
    std::string data;
    if (!e.SerializeToString(&data)) fail("EventFileWriter", "cannot serialise an Event");
    write_record(data);
  }
  static pb::Event event_at(std::int64_t step) {
    pb::Event e;
    e.set_wall_time(wall_time_now());
    e.set_step(step);
    return e;
  }
#endif
};

EventFileWriter::EventFileWriter(const std::string& logdir, const std::string& filename_suffix) {
#ifndef SOMA_HAVE_PROTOBUF
  (void)logdir, (void)filename_suffix;
  throw Error(kNoProtobuf);
#else
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(logdir, ec);
  if (ec) fail("EventFileWriter", "cannot create directory '", logdir, "': ", ec.message());

  static std::atomic<int> counter{0};
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%010lld",
                static_cast<long long>(std::floor(wall_time_now())));
  std::string name = detail::cat("events.out.tfevents.", stamp, ".", hostname(), ".",
                                 static_cast<long>(getpid()), ".", counter++, filename_suffix);

  impl_ = std::make_unique<Impl>();
  impl_->path = (fs::path(logdir) / name).string();
  impl_->file.open(impl_->path, "EventFileWriter");

  pb::Event first = Impl::event_at(0);
  first.set_file_version("brain.Event:2");
  impl_->write_event(first);
  flush();
#endif
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (...) {  // a destructor must not throw; close() explicitly to see write errors
  }
}
EventFileWriter::EventFileWriter(EventFileWriter&&) noexcept = default;
EventFileWriter& EventFileWriter::operator=(EventFileWriter&&) noexcept = default;

void EventFileWriter::add_scalar(const std::string& tag, double value, std::int64_t step) {
#ifndef SOMA_HAVE_PROTOBUF
  (void)tag, (void)value, (void)step;
  throw Error(kNoProtobuf);
#else
  if (!impl_) fail("EventFileWriter", "the writer was moved from");
  pb::Event e = Impl::event_at(step);
  pb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  impl_->write_event(e);
#endif
}

void EventFileWriter::add_graph(const std::vector<GraphNode>& nodes) {
#ifndef SOMA_HAVE_PROTOBUF
  (void)nodes;
  throw Error(kNoProtobuf);
#else
  if (!impl_) fail("EventFileWriter", "the writer was moved from");
  pb::GraphDef g;
  for (const auto& n : nodes) {
    pb::NodeDef* d = g.add_node();
    d->set_name(n.name);
    d->set_op(n.op);
    for (const auto& i : n.inputs) d->add_input(i);
    for (const auto& [k, v] : n.attrs) (*d->mutable_attr())[k].set_s(v);
  }
  pb::Event e = Impl::event_at(0);
  if (!g.SerializeToString(e.mutable_graph_def()))
    fail("EventFileWriter", "cannot serialise the graph");
  impl_->write_event(e);
#endif
}

void EventFileWriter::add_histogram(const std::string& tag, const Tensor& values,
                                    std::int64_t step, int buckets) {
#ifndef SOMA_HAVE_PROTOBUF
  (void)tag, (void)values, (void)step, (void)buckets;
  throw Error(kNoProtobuf);
#else
  if (!impl_) fail("EventFileWriter", "the writer was moved from");
  if (buckets < 1) fail("EventFileWriter", "histogram '", tag, "': buckets must be >= 1, got ", buckets);
  if (!values.defined()) fail("EventFileWriter", "histogram '", tag, "': the tensor is undefined");
  std::vector<double> v =
      (values.device().is_cpu() ? values : values.to(Device::cpu())).to_vector<double>();

  double lo = 0.0, hi = 0.0, sum = 0.0, sum_sq = 0.0;
  if (!v.empty()) lo = hi = v[0];
  for (double x : v) {
    if (!std::isfinite(x))
      fail("EventFileWriter", "histogram '", tag, "' has a non-finite value (", x,
           "); TensorBoard histograms need finite values");
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    sum_sq += x * x;
  }

  // Equal-width buckets; one bucket when every value is the same (or there are none).
  const int k = (v.empty() || lo == hi) ? 1 : buckets;
  const double width = (hi - lo) / k;
  std::vector<double> counts(std::size_t(k), 0.0);
  for (double x : v) {
    int i = k == 1 ? 0 : static_cast<int>((x - lo) / width);
    counts[std::size_t(std::clamp(i, 0, k - 1))] += 1.0;
  }

  pb::Event e = Impl::event_at(step);
  pb::Summary::Value* sv = e.mutable_summary()->add_value();
  sv->set_tag(tag);
  pb::HistogramProto* h = sv->mutable_histo();
  h->set_min(lo);
  h->set_max(hi);
  h->set_num(double(v.size()));
  h->set_sum(sum);
  h->set_sum_squares(sum_sq);
  for (int i = 0; i < k; ++i) {
    h->add_bucket_limit(i == k - 1 ? hi : lo + width * (i + 1));
    h->add_bucket(counts[std::size_t(i)]);
  }
  impl_->write_event(e);
#endif
}

void EventFileWriter::flush() {
  if (!impl_ || !impl_->file.is_open()) return;
  impl_->file.sync();
}

void EventFileWriter::close() {
  if (!impl_ || !impl_->file.is_open()) return;
  impl_->file.close();  // syncs; throws on failure
}

bool EventFileWriter::is_open() const { return impl_ && impl_->file.is_open(); }

const std::string& EventFileWriter::path() const {
  static const std::string none;
  return impl_ ? impl_->path : none;
}

}  // namespace soma::tensorboard

// ---- the callback ---------------------------------------------------------------------------

namespace soma::callbacks {

namespace {

double seconds_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Weight tags as Keras shows them: the layers' names joined by '/', then the weight's name
// ("dense/kernel"), rather than Sequential's positional keys ("0.kernel").
void collect_weights(const nn::Module& m, const std::string& prefix,
                     std::vector<std::pair<std::string, Variable>>& out) {
  for (auto& [name, var] : m.named_parameters(/*recurse=*/false)) {
    std::string tag = prefix + name;
    std::replace(tag.begin(), tag.end(), '.', '/');
    out.emplace_back(std::move(tag), var);
  }
  for (auto& [child_key, child] : m.named_children())
    collect_weights(*child, prefix + child->name() + "/", out);
}

}  // namespace

TensorBoard::TensorBoard(TensorBoardOptions options) : o_(std::move(options)) {
  if (!tensorboard::available()) throw Error(tensorboard::kNoProtobuf);
  if (o_.histogram_freq < 0)
    fail("TensorBoard", "histogram_freq must be >= 0, got ", o_.histogram_freq);
  if (o_.histogram_buckets < 1)
    fail("TensorBoard", "histogram_buckets must be >= 1, got ", o_.histogram_buckets);
  if (const auto* s = std::get_if<std::string>(&o_.update_freq)) {
    // The named frequencies: batches between writes (0: once per epoch only).
    struct Freq {
      const char* name;
      std::int64_t batch_every;
    };
    static constexpr Freq kFreqs[] = {{"epoch", 0}, {"batch", 1}};
    const Freq* f = nullptr;
    for (const auto& e : kFreqs)
      if (*s == e.name) f = &e;
    if (!f)
      fail("TensorBoard", "update_freq must be \"epoch\", \"batch\" or a positive number, got \"",
           *s, "\"");
    batch_every_ = f->batch_every;
  } else {
    batch_every_ = std::get<std::int64_t>(o_.update_freq);
    if (batch_every_ < 1)
      fail("TensorBoard", "update_freq must be \"epoch\", \"batch\" or a positive number, got ",
           batch_every_);
  }
}

std::string TensorBoard::train_dir() const {
  return (std::filesystem::path(o_.log_dir) / "train").string();
}
std::string TensorBoard::validation_dir() const {
  return (std::filesystem::path(o_.log_dir) / "validation").string();
}

void TensorBoard::on_train_begin(Logs& logs) {
  (void)logs;
  // Every fit() writes fresh files, as Keras does; TensorBoard joins them by directory.
  train_ = std::make_shared<tensorboard::EventFileWriter>(train_dir(), ".v2");
  validation_.reset();
  global_batch_ = 0;
  if (o_.write_graph && has_model()) {
    auto nodes = model_graph(model());
    if (!nodes.empty()) train_->add_graph(nodes);
  }
}

std::vector<tensorboard::EventFileWriter::GraphNode> model_graph(const nn::Model& model) {
  using nlohmann::json;
  using Node = tensorboard::EventFileWriter::GraphNode;
  json doc;
  try {
    doc = json::parse(serialization::model_config(model));
  } catch (const Error&) {
    return {};  // a subclassed model without a registered config: no layer graph
  }
  std::vector<Node> nodes;
  const json& cfg = doc.at("config");
  const auto layer_node = [](const json& entry, const std::string& name) {
    Node n{name, entry.value("class_name", std::string("Layer")), {}, {}};
    if (entry.contains("config")) n.attrs.push_back({"config", entry["config"].dump()});
    return n;
  };
  if (doc.value("class_name", std::string()) == "Functional") {
    // A layer called k times is k nodes: "name", "name_1", ...; a reference [layer, call, out].
    const auto call_name = [](const std::string& layer, std::int64_t call) {
      return call == 0 ? layer : layer + "_" + std::to_string(call);
    };
    for (const json& e : cfg.at("layers")) {
      const std::string name = e.value("name", std::string());
      const json& calls = e.at("inbound_nodes");
      if (calls.empty()) nodes.push_back(layer_node(e, name));
      for (std::size_t c = 0; c < calls.size(); ++c) {
        Node n = layer_node(e, call_name(name, std::int64_t(c)));
        for (const json& ref : calls[c])
          if (ref.is_array() && !ref.empty() && ref[0].is_string())
            n.inputs.push_back(call_name(ref[0].get<std::string>(),
                                         ref.size() > 1 && ref[1].is_number() ? ref[1].get<std::int64_t>() : 0));
        nodes.push_back(std::move(n));
      }
    }
    return nodes;
  }
  if (!cfg.contains("layers")) return {};
  Node input{"input", "InputLayer", {}, {}};
  if (cfg.contains("input_shape")) input.attrs.push_back({"shape", cfg["input_shape"].dump()});
  nodes.push_back(std::move(input));
  for (const json& e : cfg.at("layers")) {
    const std::string name =
        e.contains("config") ? e["config"].value("name", std::string()) : e.value("name", std::string());
    Node n = layer_node(e, name.empty() ? "layer_" + std::to_string(nodes.size()) : name);
    n.inputs.push_back(nodes.back().name);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

void TensorBoard::on_train_end(Logs& logs) {
  (void)logs;
  if (train_) train_->close();
  if (validation_) validation_->close();
  train_.reset();
  validation_.reset();
}

tensorboard::EventFileWriter& TensorBoard::validation_writer() {
  if (!validation_)
    validation_ = std::make_shared<tensorboard::EventFileWriter>(validation_dir(), ".v2");
  return *validation_;
}

void TensorBoard::on_epoch_begin(int epoch, Logs& logs) {
  (void)epoch, (void)logs;
  epoch_start_ = seconds_now();
}

bool TensorBoard::wants_batch_logs(bool training, std::int64_t) const {
  return training && batch_every_ > 0 && global_batch_ % batch_every_ == 0;
}

void TensorBoard::on_train_batch_end(std::int64_t batch, Logs& logs) {
  (void)batch;
  if (batch_every_ > 0 && train_ && global_batch_ % batch_every_ == 0)
    for (const auto& [key, value] : logs) train_->add_scalar("batch_" + key, value, global_batch_);
  ++global_batch_;
}

void TensorBoard::on_epoch_end(int epoch, Logs& logs) {
  if (!train_) on_train_begin(logs);  // hooks driven by hand, without on_train_begin
  for (const auto& [key, value] : logs) {
    if (key.rfind("val_", 0) == 0)
      validation_writer().add_scalar("epoch_" + key.substr(4), value, epoch);
    else
      train_->add_scalar("epoch_" + key, value, epoch);
  }
  if (o_.write_steps_per_second && params().steps > 0) {
    double secs = seconds_now() - epoch_start_;
    if (secs > 0) train_->add_scalar("epoch_steps_per_second", double(params().steps) / secs, epoch);
  }
  if (o_.histogram_freq > 0 && epoch % o_.histogram_freq == 0) write_histograms(epoch);
  train_->flush();
  if (validation_) validation_->flush();
}

void TensorBoard::write_histograms(int epoch) {
  std::vector<std::pair<std::string, Variable>> weights;
  collect_weights(model(), "", weights);
  std::set<std::string> seen;  // a layer shared at two places would repeat its weights
  for (auto& [tag, var] : weights)
    if (seen.insert(tag).second) train_->add_histogram(tag, var.value(), epoch, o_.histogram_buckets);
}

}  // namespace soma::callbacks
