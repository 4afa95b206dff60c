// Session: plans a graph for the fed shapes (replay into a plan graph with concrete shapes,
// gradient expansion, constant folding, CSE, dead-node removal, fusion, buffer reuse) and runs
// the plan with the ops' own kernels.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>

#include "backend/cpu/fused_block.hpp"
#include "graph/internal.hpp"
#include "internal/runtime_checks.hpp"
#include "soma/autocast.hpp"
#include "soma/autograd.hpp"
#include "soma/ops.hpp"
#include "soma/random_state.hpp"
#include "soma/threading.hpp"

namespace soma {

using namespace graph_detail;

namespace graph_detail {
// The elementwise table's fuse column says which ops join chains (detail::fusable_op).
bool is_fusable_op(const GraphNode& n) {
  return n.kind == NodeKind::Op && n.op && !n.op->view &&
         n.op->has(OpTag(kElementwiseUnary | kElementwiseBinary)) &&
         detail::fusable_op(n.op->name);
}

std::vector<int> find_fusion_groups(const Graph::Data& g, const std::vector<char>& live,
                                    const std::vector<int>& consumers,
                                    const std::vector<char>& fetched) {
  std::vector<int> group(g.nodes.size(), -1);
  int next = 0;
  for (std::size_t id = 0; id < g.nodes.size(); ++id) {
    const GraphNode& n = g.nodes[id];
    if (!live[id] || !is_fusable_op(n)) continue;
    const TensorSpec& out = n.outputs[0];
    bool ok = true;
    int join = -1;
    for (const auto& e : n.inputs) {
      const GraphNode& in = g.nodes[std::size_t(e.node)];
      const TensorSpec& s = in.outputs[std::size_t(e.index)];
      // Every input is the chain value, a same-shape tensor or a scalar of the output's dtype.
      if (s.dtype != out.dtype || (s.shape != out.shape && numel(s.shape) != 1)) ok = false;
      if (join < 0 && group[std::size_t(e.node)] >= 0 && consumers[std::size_t(e.node)] == 1 &&
          !fetched[std::size_t(e.node)] && s.shape == out.shape)
        join = group[std::size_t(e.node)];
    }
    if (!ok) continue;
    group[id] = join >= 0 ? join : next++;
  }
  // Groups of one node are not fused.
  std::vector<int> count(std::size_t(next), 0);
  for (int gi : group)
    if (gi >= 0) ++count[std::size_t(gi)];
  for (auto& gi : group)
    if (gi >= 0 && count[std::size_t(gi)] < 2) gi = -1;
  return group;
}
}  // namespace graph_detail

namespace {

// One step of a plan: a single node or a fused chain (run at its last member's position).
struct Step {
  std::vector<int> nodes;  // one, or the members of a fused chain in order
  std::vector<Endpoint> release;  // endpoints whose last reader is this step
};

struct Plan {
  std::shared_ptr<Graph::Data> pg;
  std::vector<std::pair<int, int>> feeds;  // user placeholder id -> plan placeholder id
  std::vector<Endpoint> fetches;           // in the plan graph
  std::vector<Step> steps;
  std::vector<int> updates;
  std::vector<int> leaves;                 // constants and variables of the plan
  std::vector<KernelFn> kernels;           // per plan node
  std::vector<std::vector<Tensor>> values; // per plan node, during a run
  std::vector<char> fused;                 // per plan node: inside a fused chain
  std::vector<int> randoms;                // random op nodes, in plan (= creation) order
  // Where the plan runs: the CPU, or the device its feeds and captured tensors live on. On a
  // device every node runs through call_op (the registry picks the kernel and allocates the
  // outputs there) and nothing is fused (the fused loops read host memory).
  Device device = Device::cpu();
  // Inter-op parallelism (built on first use): per step its successors and dependency count;
  // per releasable endpoint the number of steps reading it.
  bool deps_built = false;
  std::vector<std::vector<int>> succ;
  std::vector<int> ndeps;
  std::vector<std::vector<std::pair<Endpoint, int>>> reads;  // per step: (endpoint, reader slot)
  std::vector<Endpoint> releasable;
  std::vector<int> readers;
};

// Where a feed's shape breaks the placeholder's, or "" when it fits.
std::string shape_mismatch(const Shape& want, const Shape& got) {
  if (want.size() != got.size())
    return "rank " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    if (want[i] >= 0 && want[i] != got[i])
      return "dimension " + std::to_string(i) + " is " + std::to_string(got[i]) + " vs " +
             std::to_string(want[i]);
  return "";
}

}  // namespace

struct Session::Impl {
  static constexpr std::size_t kMaxPlans = 16;
  Graph graph;
  SessionConfig config;
  SessionStats stats;
  std::map<std::string, std::unique_ptr<Plan>> plans;
  Plan* last = nullptr;
  std::vector<std::shared_ptr<Storage>> pool;  // buffers the executor owns (reused)
  bool warned_placement = false;
  // Runs of each seeded random node so far (by name, over all plans): run k draws stream k.
  std::unordered_map<std::string, std::uint64_t> rng_runs;
  std::mutex pool_mu;  // allocate() is called from several threads with inter-op threads

  Plan& plan_for(const std::vector<Endpoint>& fetches, const std::vector<std::pair<int, Tensor>>& feeds);
  std::unique_ptr<Plan> build(const std::vector<Endpoint>& fetches,
                              const std::vector<std::pair<int, Tensor>>& feeds);
  Tensor allocate(const TensorSpec& spec);
  void run_fused(Plan& p, const Step& s);
  void run_fused_f32(Plan& p, const Step& s, const Tensor& out);
  void run_step(Plan& p, const Step& s);
  void run_parallel(Plan& p);
  std::vector<Tensor> execute(Plan& p, const std::vector<std::pair<int, Tensor>>& feeds);
};

std::unique_ptr<Plan> Session::Impl::build(const std::vector<Endpoint>& fetches,
                                           const std::vector<std::pair<int, Tensor>>& feeds) {
  const auto& gd = graph.data();
  auto& nodes = gd->nodes;
  auto plan = std::make_unique<Plan>();
  auto pg = std::make_shared<Graph::Data>();
  pg->fold = pg->cse = config.optimize;
  plan->pg = pg;
  NoGradScope no_grad;

  // Dead-node removal: only what the fetches need.
  std::vector<char> needed(nodes.size(), 0);
  for (auto& e : fetches) needed[std::size_t(e.node)] = 1;
  for (std::size_t id = nodes.size(); id-- > 0;)
    if (needed[id])
      for (auto& e : nodes[id].inputs) needed[std::size_t(e.node)] = 1;

  // Replay into the plan graph with concrete shapes.
  std::vector<std::vector<Tensor>> map(nodes.size());
  auto in_tensors = [&](const GraphNode& n, std::size_t from, std::size_t to) {
    std::vector<Tensor> ts;
    for (std::size_t i = from; i < to; ++i) {
      const Endpoint& e = n.inputs[i];
      ts.push_back(map[std::size_t(e.node)][std::size_t(e.index)]);
    }
    return ts;
  };
  auto as_symbolic = [&](const Tensor& t) {
    Endpoint e = endpoint_in(pg, t);
    return pg->nodes[std::size_t(e.node)].symbolic[std::size_t(e.index)];
  };
  for (std::size_t id = 0; id < nodes.size(); ++id) {
    if (!needed[id]) continue;
    GraphNode& n = nodes[id];
    switch (n.kind) {
      case NodeKind::Placeholder: {
        const Tensor* fed = nullptr;
        for (auto& [fid, t] : feeds)
          if (fid == int(id)) fed = &t;
        const TensorSpec& s = n.outputs[0];
        if (!fed)
          fail("Session.run", "placeholder '", n.name, "' (shape ", shape_str(s.shape), ", ",
               dtype_name(s.dtype), ") is needed by the fetches but was not fed");
        GraphNode p;
        p.kind = NodeKind::Placeholder;
        p.outputs = {{fed->shape(), fed->dtype()}};
        p.device = fed->device();
        p.name = n.name;
        int pid = add_node(pg, std::move(p));
        plan->feeds.push_back({int(id), pid});
        map[id] = pg->nodes[std::size_t(pid)].symbolic;
        break;
      }
      case NodeKind::Constant:
      case NodeKind::Variable: {
        if (n.kind == NodeKind::Constant && !n.fold_decided) {
          // A constant nobody but the graph holds cannot change: constant folding may use it.
          n.foldable = n.value.impl_ptr().use_count() == 1 && n.value.storage().use_count() == 1;
          n.fold_decided = true;
        }
        GraphNode p;
        p.kind = n.kind;
        p.value = n.value;
        p.variable = n.variable;
        p.outputs = {{n.value.shape(), n.value.dtype()}};
        p.name = n.name;
        if (n.kind == NodeKind::Constant) p.foldable = n.foldable && config.optimize;
        p.fold_decided = true;
        std::string ckey = p.foldable ? constant_key(n.value) : std::string();
        if (!ckey.empty() && pg->cse_table.count(ckey)) {  // an equal small constant exists
          ++pg->merged;
          map[id] = pg->nodes[std::size_t(pg->cse_table[ckey])].symbolic;
          break;
        }
        int pid = add_node(pg, std::move(p));
        pg->captures[n.value.impl_ptr().get()] = pid;
        if (!ckey.empty()) pg->cse_table.emplace(ckey, pid);
        map[id] = pg->nodes[std::size_t(pid)].symbolic;
        break;
      }
      case NodeKind::Op: {
        std::vector<Tensor> ins = in_tensors(n, 0, n.inputs.size());
        pg->forced_name = n.name;
        map[id] = add_op_in(pg, *n.op, ins, n.attrs);
        break;
      }
      case NodeKind::Gradients: {
        std::vector<Tensor> ys = in_tensors(n, 0, std::size_t(n.num_ys));
        std::vector<Tensor> xs = in_tensors(n, std::size_t(n.num_ys), n.inputs.size());
        std::vector<Tensor> gs = build_gradients(pg, ys, xs);
        for (std::size_t i = 0; i < gs.size(); ++i) {
          if (!gs[i].defined()) gs[i] = zeros_like(xs[i]);
          map[id].push_back(as_symbolic(gs[i]));
        }
        break;
      }
      case NodeKind::Update: {
        GraphNode p;
        p.kind = NodeKind::Update;
        p.optimizer = n.optimizer;
        p.attrs = n.attrs;
        p.outputs = n.outputs;
        p.name = n.name;
        if (n.attrs.b("from_loss")) {
          std::vector<Tensor> loss = in_tensors(n, 0, 1);
          std::vector<Tensor> vars = in_tensors(n, 1, n.inputs.size());
          std::vector<Tensor> gs = build_gradients(pg, loss, vars);
          for (std::size_t i = 0; i < gs.size(); ++i)
            if (gs[i].defined()) {  // as eager: variables without a gradient are skipped
              p.inputs.push_back(endpoint_in(pg, gs[i]));
              p.update_vars.push_back(n.update_vars[i]);
            }
          if (p.inputs.empty())
            fail("Session.run", "update node '", n.name,
                 "': no variable receives a gradient from the loss");
        } else {
          for (auto& t : in_tensors(n, 0, n.inputs.size()))
            p.inputs.push_back(endpoint_in(pg, t));
          p.update_vars = n.update_vars;
        }
        int pid = add_node(pg, std::move(p));
        map[id] = pg->nodes[std::size_t(pid)].symbolic;
        break;
      }
    }
  }
  for (auto& e : fetches) plan->fetches.push_back(endpoint_in(pg, map[std::size_t(e.node)][std::size_t(e.index)]));
  stats.folded_nodes += pg->folded;
  stats.cse_nodes += pg->merged;

  // Liveness in the plan graph (folding and CSE leave dead nodes behind).
  auto& pn = pg->nodes;
  std::vector<char> live(pn.size(), 0), fetched(pn.size(), 0);
  for (auto& e : plan->fetches) live[std::size_t(e.node)] = fetched[std::size_t(e.node)] = 1;
  for (std::size_t id = pn.size(); id-- > 0;)
    if (live[id])
      for (auto& e : pn[id].inputs) live[std::size_t(e.node)] = 1;
  std::vector<int> consumers(pn.size(), 0);
  for (std::size_t id = 0; id < pn.size(); ++id)
    if (live[id])
      for (auto& e : pn[id].inputs) ++consumers[std::size_t(e.node)];

  // The plan's device: the one its live feeds and captured tensors are on, if not the CPU.
  for (std::size_t id = 0; id < pn.size(); ++id) {
    const GraphNode& n = pn[id];
    if (!live[id] || n.device.is_cpu() ||
        (n.kind != NodeKind::Placeholder && n.kind != NodeKind::Constant &&
         n.kind != NodeKind::Variable))
      continue;
    if (plan->device.is_cpu()) plan->device = n.device;
    else if (n.device != plan->device)
      fail("Session.run", "the graph reads tensors on ", plan->device.str(), " and on ",
           n.device.str(), " ('", n.name, "'); feed and capture tensors of one device");
  }
  const bool on_device = !plan->device.is_cpu();

  // Kernels, with soft placement (a device plan dispatches through call_op instead).
  plan->kernels.assign(pn.size(), nullptr);
  for (std::size_t id = 0; id < pn.size(); ++id) {
    if (on_device || !live[id] || pn[id].kind != NodeKind::Op) continue;
    const OpDef& def = *pn[id].op;
    KernelFn k = def.kernels[int(config.device.kind)];
    if (!k || !config.device.is_cpu()) {
      // No device backend besides the CPU holds data yet: everything runs on the CPU.
      if (!config.soft_placement)
        fail("Session.run", "node '", pn[id].name, "' (", def.name, ") has no kernel on ",
             config.device.str(), " and soft placement is off");
      ++stats.soft_placements;
      if (!warned_placement) {
        warned_placement = true;
        std::cerr << "soma: graph node '" << pn[id].name << "' (" << def.name
                  << ") cannot run on " << config.device.str()
                  << "; running on cpu (soft placement; said once per session)\n";
      }
      k = def.kernels[int(DeviceKind::CPU)];
    }
    if (!k) fail("Session.run", "node '", pn[id].name, "' (", def.name, ") has no CPU kernel");
    plan->kernels[id] = k;
  }

  // Fusion of elementwise chains.
  std::vector<int> group = config.optimize && !on_device
                               ? find_fusion_groups(*pg, live, consumers, fetched)
                               : std::vector<int>(pn.size(), -1);
  plan->fused.assign(pn.size(), 0);
  std::map<int, std::vector<int>> members;
  for (std::size_t id = 0; id < pn.size(); ++id)
    if (group[id] >= 0) {
      members[group[id]].push_back(int(id));
      pn[id].fused_group = group[id];
      plan->fused[id] = 1;
      ++stats.fused_nodes;
    }
  std::map<int, int> group_last;
  for (auto& [gi, ms] : members) group_last[ms.back()] = gi;

  // Steps in topological (id) order; updates after everything else.
  std::vector<int> step_of(pn.size(), -1);
  for (std::size_t id = 0; id < pn.size(); ++id) {
    if (!live[id]) continue;
    const GraphNode& n = pn[id];
    if (n.kind == NodeKind::Constant || n.kind == NodeKind::Variable) plan->leaves.push_back(int(id));
    if (n.kind == NodeKind::Update) plan->updates.push_back(int(id));
    if (n.kind != NodeKind::Op) continue;
    if (n.attrs.has("rng")) plan->randoms.push_back(int(id));
    if (group[id] >= 0) {
      auto it = group_last.find(int(id));
      if (it == group_last.end()) continue;
      Step s;
      s.nodes = members[it->second];
      for (int m : s.nodes) step_of[std::size_t(m)] = int(plan->steps.size());
      plan->steps.push_back(std::move(s));
    } else {
      step_of[id] = int(plan->steps.size());
      plan->steps.push_back(Step{{int(id)}, {}});
    }
  }
  // Memory planning: an endpoint's buffer goes back to the pool after its last reader's step.
  std::map<std::pair<int, int>, int> last_use;
  for (std::size_t id = 0; id < pn.size(); ++id) {
    if (!live[id] || step_of[id] < 0) continue;
    for (auto& e : pn[id].inputs) {
      auto k = std::make_pair(e.node, e.index);
      last_use[k] = std::max(last_use.count(k) ? last_use[k] : -1, step_of[id]);
    }
  }
  for (auto& [k, s] : last_use) {
    const GraphNode& src = pn[std::size_t(k.first)];
    if (src.kind != NodeKind::Op || fetched[std::size_t(k.first)] ||
        (plan->fused[std::size_t(k.first)] && step_of[std::size_t(k.first)] == s))
      continue;
    bool read_by_update = false;
    for (int u : plan->updates)
      for (auto& e : pn[std::size_t(u)].inputs) read_by_update |= e.node == k.first;
    if (read_by_update) continue;
    plan->steps[std::size_t(s)].release.push_back({k.first, k.second});
  }
  plan->values.assign(pn.size(), {});
  ++stats.plans;
  return plan;
}

Plan& Session::Impl::plan_for(const std::vector<Endpoint>& fetches,
                              const std::vector<std::pair<int, Tensor>>& feeds) {
  std::string key;
  for (auto& e : fetches) key += std::to_string(e.node) + ":" + std::to_string(e.index) + ",";
  key += "|";
  for (auto& [id, t] : feeds)
    key += std::to_string(id) + dtype_name(t.dtype()) + shape_str(t.shape()) + t.device().str();
  auto it = plans.find(key);
  if (it == plans.end()) {
    // Feeds whose shapes keep changing (e.g. every batch size) would keep a plan, and the pool
    // buffers of every size, for each: past kMaxPlans start over, dropping the idle buffers.
    if (plans.size() >= kMaxPlans) {
      plans.clear();
      last = nullptr;
      std::lock_guard<std::mutex> lock(pool_mu);
      std::erase_if(pool, [](const std::shared_ptr<Storage>& st) { return st.use_count() == 1; });
    }
    it = plans.emplace(key, build(fetches, feeds)).first;
  }
  return *it->second;
}

Tensor Session::Impl::allocate(const TensorSpec& spec) {
  std::size_t nbytes = std::size_t(numel(spec.shape)) * dtype_size(spec.dtype);
  std::shared_ptr<Storage> st;
  std::lock_guard<std::mutex> lock(pool_mu);
  for (auto& s : pool)
    if (s.use_count() == 1 && s->nbytes == nbytes) {
      st = s;
      break;
    }
  if (!st) {
    st = Storage::allocate(nbytes, Device::cpu());
    pool.push_back(st);
    ++stats.buffer_allocations;
    ++stats.last_run_allocations;
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(st);
  impl->shape = spec.shape;
  impl->strides = contiguous_strides(spec.shape);
  impl->dtype = spec.dtype;
  impl->device = Device::cpu();
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

// set_check_numerics(true): the first node whose output holds inf/nan, by name and op.
void check_node_numerics(const GraphNode& nd, const std::vector<Tensor>& ins,
                         const std::vector<Tensor>& outs) {
  if (!detail::check_numerics_on()) return;
  try {
    detail::check_op_numerics(*nd.op, ins, outs);
  } catch (const Error& e) {
    fail("graph node '" + nd.name + "' (" + nd.op->name + ")", e.what());
  }
}

// ---- fused f32 chains: on registers, or one tight loop per op over a block that stays in L1 -
// A fused chain runs block by block: each op's own kernel on a cache-sized slice, so the
// intermediates never leave the cache (and are never allocated at full size).
void Session::Impl::run_fused(Plan& p, const Step& s) {
  auto& pn = p.pg->nodes;
  const GraphNode& last = pn[std::size_t(s.nodes.back())];
  const TensorSpec out_spec = last.outputs[0];
  const std::int64_t n = numel(out_spec.shape);
  // External inputs must be contiguous (or scalars); otherwise run the members one by one.
  std::unordered_set<int> in_chain(s.nodes.begin(), s.nodes.end());
  bool ok = true, host = true;  // host: the inline f32 loops read the inputs' memory directly
  for (int m : s.nodes)
    for (auto& e : pn[std::size_t(m)].inputs)
      if (!in_chain.count(e.node)) {
        const Tensor& t = p.values[std::size_t(e.node)][std::size_t(e.index)];
        if (t.numel() != 1 && !t.is_contiguous()) ok = false;
        if (!t.device().is_cpu()) host = false;
      }
  // Checking numerics runs the members one by one, so that the first bad one is named.
  if (!ok || detail::check_numerics_on()) {
    for (int m : s.nodes) {
      const GraphNode& nd = pn[std::size_t(m)];
      std::vector<Tensor> ins, outs;
      for (auto& e : nd.inputs) ins.push_back(p.values[std::size_t(e.node)][std::size_t(e.index)]);
      outs.push_back(allocate(nd.outputs[0]));
      p.kernels[std::size_t(m)](ins, outs, nd.attrs);
      check_node_numerics(nd, ins, outs);
      p.values[std::size_t(m)] = outs;
    }
    return;
  }
  Tensor out = allocate(out_spec);
  const DType dt = out_spec.dtype;
  if (dt == DType::f32 && host && out.device().is_cpu()) {
    run_fused_f32(p, s, out);
    p.values[std::size_t(s.nodes.back())] = {out};
    return;
  }
  constexpr std::int64_t kBlock = 32768;
  const std::int64_t nblocks = (n + kBlock - 1) / kBlock;
  int nt = std::max(1, std::min<int>(omp_get_max_threads(), int(nblocks)));
  auto flat = [](const Tensor& t, std::int64_t b, std::int64_t len) {
    return Tensor::view_of(t, {len}, {1}, t.offset() + b);
  };
  std::vector<Tensor> temps;
  const std::int64_t half = std::min(n, kBlock);
  for (int t = 0; t < nt; ++t) temps.push_back(allocate({{half * 2}, dt}));
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t blk = 0; blk < nblocks; ++blk) {
    const std::int64_t b = blk * kBlock, len = std::min(kBlock, n - b);
    const Tensor& tmp = temps[std::size_t(omp_get_thread_num())];
    Tensor cur;  // the chain value of this block
    for (std::size_t k = 0; k < s.nodes.size(); ++k) {
      const GraphNode& nd = pn[std::size_t(s.nodes[k])];
      std::vector<Tensor> ins;
      for (auto& e : nd.inputs) {
        if (in_chain.count(e.node)) {
          ins.push_back(cur);
          continue;
        }
        const Tensor& t = p.values[std::size_t(e.node)][std::size_t(e.index)];
        ins.push_back(t.numel() == 1 && numel(out_spec.shape) != 1
                          ? Tensor::view_of(t, {}, {}, t.offset())
                          : flat(t, b, len));
      }
      // Alternate between two halves of the block buffer; the last op writes the output.
      std::vector<Tensor> outs{k + 1 == s.nodes.size() ? flat(out, b, len)
                                                       : flat(tmp, std::int64_t(k % 2) * half, len)};
      p.kernels[std::size_t(s.nodes[k])](ins, outs, nd.attrs);
      cur = outs[0];
    }
  }
  std::vector<Tensor> shaped{out};
  p.values[std::size_t(s.nodes.back())] = shaped;
}

// f32 chains, blocks of 2048 floats spread over the threads. A chain of inline ops only runs on
// vector registers (fused_chain_in_registers); otherwise each op is a vectorisable loop over the
// block (8 KB: the chain value and the previous one stay in L1), and ops without an inline loop
// run their kernel on the block. One pass over memory for the inputs and output; outputs beyond
// the caches are written with streaming stores.
void Session::Impl::run_fused_f32(Plan& p, const Step& s, const Tensor& out) {
  auto& pn = p.pg->nodes;
  const std::int64_t n = out.numel();
  constexpr std::int64_t kBlock = 2048;
  const std::int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::unordered_set<int> in_chain(s.nodes.begin(), s.nodes.end());
  std::vector<detail::FusedInstr> prog;
  bool all_inline = true;
  for (int m : s.nodes) {
    const GraphNode& nd = pn[std::size_t(m)];
    detail::FusedInstr in = detail::fused_instr(nd.op->name, nd.attrs);
    in.nargs = int(nd.inputs.size());
    if (in.nargs > 2) in.code = detail::FusedCode::Kernel;
    for (int i = 0; i < in.nargs && i < 2; ++i) {
      const Endpoint& e = nd.inputs[std::size_t(i)];
      if (in_chain.count(e.node)) continue;  // Chain
      const Tensor& t = p.values[std::size_t(e.node)][std::size_t(e.index)];
      if (t.numel() == 1 && n != 1) {
        in.kind[i] = detail::FusedInstr::Scalar;
        in.v[i] = t.data<float>()[0];
      } else {
        in.kind[i] = detail::FusedInstr::Array;
        in.p[i] = t.data<float>();
      }
    }
    // A unary op on a scalar (not the chain) has no inline loop.
    if (in.nargs == 1 && in.kind[0] == detail::FusedInstr::Scalar)
      in.code = detail::FusedCode::Kernel;
    all_inline &= in.code != detail::FusedCode::Kernel;
    prog.push_back(in);
  }
  const int nt = std::max(1, std::min<int>(omp_get_max_threads(), int(nblocks)));
  const std::int64_t half = std::min(n, kBlock);
  // An output beyond the caches goes to memory with streaming stores (a plain store would first
  // read each output line from memory, a third pass).
  const bool stream = n * std::int64_t(sizeof(float)) >= detail::kStreamStoreBytes;
  if (all_inline && detail::fused_chain_in_registers_available()) {
    // Every op has an inline form: the whole chain runs on registers, one load per array
    // operand and one store per element (no per-op trip through L1).
    float* o = out.data<float>();
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static) nowait
      for (std::int64_t blk = 0; blk < nblocks; ++blk) {
        const std::int64_t b = blk * kBlock;
        detail::fused_chain_in_registers(prog.data(), int(prog.size()), o, b,
                                         std::min(kBlock, n - b), stream);
      }
      if (stream) detail::stream_store_fence();
    }
    return;
  }
  // Streaming: the last op writes the block into a third L1 buffer, which is then streamed out.
  const std::int64_t per_thread = half * (stream ? 3 : 2);
  Tensor temps = allocate({{per_thread * nt}, DType::f32});
  float* tbase = temps.data<float>();
  float* obase = out.data<float>();
  auto flat = [](const Tensor& t, std::int64_t b, std::int64_t len) {
    return Tensor::view_of(t, {len}, {1}, t.offset() + b);
  };
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static) nowait
    for (std::int64_t blk = 0; blk < nblocks; ++blk) {
      const std::int64_t b = blk * kBlock, len = std::min(kBlock, n - b);
      const std::int64_t tb = std::int64_t(omp_get_thread_num()) * per_thread;  // its buffers
      const float* cur = nullptr;
      std::int64_t cur_at = -1;  // where cur lives: an offset into temps, or -1 for out
      for (std::size_t k = 0; k < prog.size(); ++k) {
        const detail::FusedInstr& in = prog[k];
        const bool last = k + 1 == prog.size();
        const bool to_out = last && !stream;  // the op writes straight into the output
        const std::int64_t dst_at = tb + (last ? 2 : std::int64_t(k % 2)) * half;
        float* dst = to_out ? obase + b : tbase + dst_at;
        if (in.code != detail::FusedCode::Kernel) {
          const float* a[2] = {nullptr, nullptr};
          float v[2] = {0, 0};
          for (int i = 0; i < in.nargs; ++i) {
            if (in.kind[i] == detail::FusedInstr::Chain) a[i] = cur;
            else if (in.kind[i] == detail::FusedInstr::Array) a[i] = in.p[i] + b;
            else v[i] = in.v[i];
          }
          fused_block_op(in, dst, a[0], v[0], a[1], v[1], len);
        } else {
          const GraphNode& nd = pn[std::size_t(s.nodes[k])];
          std::vector<Tensor> ins;
          for (auto& e : nd.inputs) {
            if (in_chain.count(e.node)) {
              ins.push_back(cur_at >= 0 ? flat(temps, cur_at, len) : flat(out, b, len));
              continue;
            }
            const Tensor& t = p.values[std::size_t(e.node)][std::size_t(e.index)];
            ins.push_back(t.numel() == 1 && n != 1 ? Tensor::view_of(t, {}, {}, t.offset())
                                                   : flat(t, b, len));
          }
          std::vector<Tensor> outs{to_out ? flat(out, b, len) : flat(temps, dst_at, len)};
          p.kernels[std::size_t(s.nodes[k])](ins, outs, nd.attrs);
        }
        cur = dst;
        cur_at = to_out ? -1 : dst_at;
      }
      if (stream) detail::stream_store_block(obase + b, cur, len);
    }
    if (stream) detail::stream_store_fence();
  }
}

void Session::Impl::run_step(Plan& p, const Step& s) {
  if (s.nodes.size() > 1) {
    run_fused(p, s);
    return;
  }
  auto& pn = p.pg->nodes;
  int id = s.nodes[0];
  const GraphNode& nd = pn[std::size_t(id)];
  std::vector<Tensor> ins, outs;
  ins.reserve(nd.inputs.size());
  for (auto& e : nd.inputs) ins.push_back(p.values[std::size_t(e.node)][std::size_t(e.index)]);
  if (!p.device.is_cpu()) {  // the registry dispatches by the inputs' device and allocates there
    try {
      p.values[std::size_t(id)] = call_op(*nd.op, ins, nd.attrs);
    } catch (const Error& e) {
      fail("graph node '" + nd.name + "'", e.what());
    }
    return;
  }
  if (!nd.op->view) {
    outs.reserve(nd.outputs.size());
    for (auto& o : nd.outputs) outs.push_back(allocate(o));
  }
  try {
    p.kernels[std::size_t(id)](ins, outs, nd.attrs);
  } catch (const Error& e) {
    fail("graph node '" + nd.name + "'", e.what());
  }
  check_node_numerics(nd, ins, outs);
  p.values[std::size_t(id)] = std::move(outs);
}

// Independent steps run on `inter_op_threads` threads: a step is ready once the steps making
// its inputs finished; an intermediate's buffer goes back to the pool when its last reader
// (in time, not in plan order) finished. Each thread's kernels get an equal share of the
// intra-op threads.
void Session::Impl::run_parallel(Plan& p) {
  auto& pn = p.pg->nodes;
  const std::size_t ns = p.steps.size();
  if (!p.deps_built) {
    std::vector<int> step_of(pn.size(), -1);
    for (std::size_t s = 0; s < ns; ++s)
      for (int id : p.steps[s].nodes) step_of[std::size_t(id)] = int(s);
    std::map<std::pair<int, int>, int> slot;
    for (const auto& st : p.steps)
      for (const auto& e : st.release)
        if (!slot.count({e.node, e.index})) {
          slot[{e.node, e.index}] = int(p.releasable.size());
          p.releasable.push_back(e);
        }
    p.readers.assign(p.releasable.size(), 0);
    p.succ.assign(ns, {});
    p.ndeps.assign(ns, 0);
    p.reads.assign(ns, {});
    for (std::size_t s = 0; s < ns; ++s) {
      std::set<int> deps;
      std::set<int> read_slots;
      std::unordered_set<int> members(p.steps[s].nodes.begin(), p.steps[s].nodes.end());
      for (int id : p.steps[s].nodes)
        for (const auto& e : pn[std::size_t(id)].inputs) {
          if (members.count(e.node)) continue;
          int d = step_of[std::size_t(e.node)];
          if (d >= 0) deps.insert(d);
          auto it = slot.find({e.node, e.index});
          if (it != slot.end() && read_slots.insert(it->second).second) {
            p.reads[s].push_back({e, it->second});
            ++p.readers[std::size_t(it->second)];
          }
        }
      p.ndeps[s] = int(deps.size());
      for (int d : deps) p.succ[std::size_t(d)].push_back(int(s));
    }
    p.deps_built = true;
  }
  std::vector<int> pending = p.ndeps;
  std::vector<int> readers = p.readers;
  std::deque<int> ready;
  for (std::size_t s = 0; s < ns; ++s)
    if (pending[s] == 0) ready.push_back(int(s));
  std::mutex mu;
  std::condition_variable cv;
  std::size_t done = 0;
  std::exception_ptr error;
  const int nthreads = config.inter_op_threads;
  const int intra = std::max(1, omp_get_max_threads() / nthreads);
  // Autocast is per thread: the workers take the scope of the thread that called run().
  const DType autocast = autocast_dtype();
  auto worker = [&] {
    omp_set_num_threads(intra);
    AutocastScope autocast_scope(autocast);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return !ready.empty() || done == ns || error; });
      if (done == ns || error) return;
      int s = ready.front();
      ready.pop_front();
      lock.unlock();
      try {
        run_step(p, p.steps[std::size_t(s)]);
      } catch (...) {
        lock.lock();
        if (!error) error = std::current_exception();
        cv.notify_all();
        return;
      }
      lock.lock();
      for (auto& [e, k] : p.reads[std::size_t(s)])
        if (--readers[std::size_t(k)] == 0) p.values[std::size_t(e.node)][std::size_t(e.index)] = Tensor();
      for (int nxt : p.succ[std::size_t(s)])
        if (--pending[std::size_t(nxt)] == 0) ready.push_back(nxt);
      ++done;
      cv.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < nthreads; ++t) threads.emplace_back(worker);
  const int saved = omp_get_max_threads();
  worker();
  omp_set_num_threads(saved);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

std::vector<Tensor> Session::Impl::execute(Plan& p, const std::vector<std::pair<int, Tensor>>& feeds) {
  auto& pn = p.pg->nodes;
  EagerScope eager;
  NoGradScope no_grad;
  stats.last_run_allocations = 0;
  ++stats.runs;
  int saved_threads = 0;
  if (config.intra_op_threads > 0) {
    saved_threads = get_num_threads();
    set_num_threads(config.intra_op_threads);
  }
  struct Restore {
    int n;
    ~Restore() {
      if (n > 0) set_num_threads(n);
    }
  } restore{saved_threads};

  for (auto& [uid, pid] : p.feeds)
    for (auto& [fid, t] : feeds)
      if (fid == uid) p.values[std::size_t(pid)] = {t};
  for (int id : p.leaves) p.values[std::size_t(id)] = {pn[std::size_t(id)].value};
  // Random nodes get this run's streams up front, in plan order: an unseeded one the global
  // generator's next stream (as the eager op would when it ran), a seeded one its run number.
  for (int id : p.randoms) {
    Attrs& a = pn[std::size_t(id)].attrs;
    std::uint64_t seed = 0, stream = 0;
    const std::int64_t mode = a.i("rng");
    if (mode == 0) {
      std::tie(seed, stream) = detail::next_global_stream();
    } else {
      const std::uint64_t k = rng_runs[pn[std::size_t(id)].name]++;
      seed = std::uint64_t(a.i("seed"));
      if (mode == 2)
        seed = detail::splitmix64(seed ^ detail::splitmix64(std::uint64_t(a.i("calls")) + k));
      else
        stream = k;
    }
    a.set("run_seed", std::int64_t(seed)).set("run_stream", std::int64_t(stream));
  }

  if (config.inter_op_threads > 1 && p.steps.size() > 1) {
    run_parallel(p);
  } else {
    for (const Step& s : p.steps) {
      run_step(p, s);
      for (auto& e : s.release) p.values[std::size_t(e.node)][std::size_t(e.index)] = Tensor();
    }
  }

  std::vector<Tensor> out;
  for (auto& e : p.fetches) {
    auto& v = p.values[std::size_t(e.node)];
    out.push_back(v.empty() ? Tensor() : v[std::size_t(e.index)]);  // updates: set below
  }
  if (!p.updates.empty()) {
    // Fetched values that share a variable's memory are copied before the update changes it.
    for (auto& t : out) {
      if (!t.defined()) continue;
      for (int id : p.leaves)
        if (pn[std::size_t(id)].kind == NodeKind::Variable &&
            pn[std::size_t(id)].value.storage() == t.storage()) {
          t = t.clone();
          break;
        }
    }
    for (int id : p.updates) {
      const GraphNode& nd = pn[std::size_t(id)];
      std::vector<Tensor> grads;
      for (auto& e : nd.inputs) grads.push_back(p.values[std::size_t(e.node)][std::size_t(e.index)]);
      try {
        nd.optimizer->apply_gradients(grads, nd.update_vars);
      } catch (const Error& e) {
        fail("graph node '" + nd.name + "'", e.what());
      }
      Tensor it = scalar(double(nd.optimizer->iterations()), DType::i64);
      for (std::size_t k = 0; k < p.fetches.size(); ++k)
        if (p.fetches[k].node == id) out[k] = it;
    }
  }
  for (auto& v : p.values) v.clear();
  return out;
}

Session::Session(Graph graph, SessionConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->graph = std::move(graph);
  impl_->config = config;
  if (config.inter_op_threads < 1 || config.intra_op_threads < 0)
    fail("Session", "thread counts must be positive (intra 0 means unchanged), got intra ",
         config.intra_op_threads, ", inter ", config.inter_op_threads);
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

const SessionStats& Session::stats() const { return impl_->stats; }
const Graph& Session::graph() const { return impl_->graph; }

std::vector<Tensor> Session::run(const std::vector<Tensor>& fetches, const Feeds& feeds) {
  const Graph& g = impl_->graph;
  std::vector<Endpoint> eps;
  for (const auto& f : fetches) {
    if (!f.defined()) fail("Session.run", "a fetch is an undefined Tensor");
    if (!g.owns(f))
      fail("Session.run", is_symbolic(f) ? "a fetch belongs to another graph"
                                         : "a fetch is a concrete tensor, not a graph node's output");
    eps.push_back(g.endpoint_of(f));
  }
  std::vector<std::pair<int, Tensor>> fd;
  for (const auto& [ph, value] : feeds) {
    if (!g.owns(ph)) fail("Session.run", "a feed key is not a placeholder of this graph");
    const GraphNode& n = g.node_of(ph);
    if (n.kind != NodeKind::Placeholder)
      fail("Session.run", "only placeholders can be fed; '", n.name, "' is a ", n.op_name());
    if (!value.defined() || is_symbolic(value))
      fail("Session.run", "the value fed to placeholder '", n.name, "' must be a concrete tensor");
    const TensorSpec& s = n.outputs[0];
    if (value.dtype() != s.dtype)
      fail("Session.run", "placeholder '", n.name, "' expects ", dtype_name(s.dtype), ", fed ",
           dtype_name(value.dtype()));
    std::string why = shape_mismatch(s.shape, value.shape());
    if (!why.empty())
      fail("Session.run", "placeholder '", n.name, "' has shape ", shape_str(s.shape),
           "; the value fed has shape ", shape_str(value.shape()), " (", why, ")");
    for (auto& [id, t] : fd) {
      if (id == n.id) fail("Session.run", "placeholder '", n.name, "' is fed twice");
      if (t.device() != value.device())
        fail("Session.run", "the value fed to '", n.name, "' is on ", value.device().str(),
             ", another feed is on ", t.device().str(), "; feed tensors of one device");
    }
    fd.emplace_back(n.id, value);
  }
  Plan& p = impl_->plan_for(eps, fd);
  impl_->last = &p;
  return impl_->execute(p, fd);
}

Tensor Session::run(const Tensor& fetch, const Feeds& feeds) { return run(std::vector<Tensor>{fetch}, feeds)[0]; }

std::string plan_dot_of(const Graph::Data& g);  // serialize.cpp

std::string Session::plan_dot() const {
  if (!impl_->last) fail("Session.plan_dot", "nothing has run yet");
  return plan_dot_of(*impl_->last->pg);
}

}  // namespace soma
