// Slot discovery against DeepSpeed runner.py main()'s documented behaviour (reference §5):
// hostfile > --num_procs > visible GPUs; CUDA_VISIBLE_DEVICES without filters means
// --include localhost:<ids>; --num_* with -i/-e is an error; one local host only for now.
// The machine is a fake probe, so no GPU is needed.
#include "zt/launcher/world.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace zt::launcher {
namespace {

MachineProbe probe_with(int gpus, std::optional<std::string> cvd = std::nullopt) {
  MachineProbe p;
  p.cuda_visible_devices = std::move(cvd);
  p.cuda_device_count = [gpus] { return gpus; };
  p.local_host_names = {"localhost", "127.0.0.1", "box", "box.lab"};
  return p;
}

LaunchOptions options_no_hostfile() {
  LaunchOptions o;
  o.hostfile = "/nonexistent/zt/job/hostfile";  // the default path, absent
  o.program = "prog";
  return o;
}

class HostfileTemp {
 public:
  explicit HostfileTemp(const std::string& text) {
    char path[] = "/tmp/zt_world_hostfile_XXXXXX";
    int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = path;
    std::ofstream(path_) << text;
  }
  ~HostfileTemp() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

WorldInfo discover_ok(const LaunchOptions& o, const MachineProbe& p) {
  Result<WorldInfo> w = world_discover(o, p);
  EXPECT_TRUE(w.is_ok()) << w.status().message();
  return w.is_ok() ? *w : WorldInfo{};
}

std::string discover_error(const LaunchOptions& o, const MachineProbe& p) {
  Result<WorldInfo> w = world_discover(o, p);
  EXPECT_FALSE(w.is_ok());
  return w.is_ok() ? "" : w.status().message();
}

TEST(LauncherWorld, AllVisibleGpusOnLocalhost) {
  WorldInfo w = discover_ok(options_no_hostfile(), probe_with(4));
  EXPECT_EQ(w.hosts, (Resources{{"localhost", {0, 1, 2, 3}}}));
  EXPECT_EQ(w.kind, SlotKind::kGpu);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(world_size(w), 4);
}

TEST(LauncherWorld, CudaVisibleDevicesBecomesInclude) {
  WorldInfo w = discover_ok(options_no_hostfile(), probe_with(8, "3,1"));
  EXPECT_EQ(w.hosts, (Resources{{"localhost", {1, 3}}}));
}

TEST(LauncherWorld, CudaVisibleDevicesIsIgnoredWithFilters) {
  LaunchOptions o = options_no_hostfile();
  o.include = "localhost:0,2";
  EXPECT_EQ(discover_ok(o, probe_with(4, "3")).hosts, (Resources{{"localhost", {0, 2}}}));
  LaunchOptions g = options_no_hostfile();
  g.num_gpus = 2;
  EXPECT_EQ(discover_ok(g, probe_with(4, "3")).hosts, (Resources{{"localhost", {0, 1}}}));
}

TEST(LauncherWorld, CudaVisibleDevicesMustBeIndices) {
  std::string m = discover_error(options_no_hostfile(), probe_with(1, "GPU-1234abcd"));
  EXPECT_NE(m.find("GPU-1234abcd"), std::string::npos) << m;
}

TEST(LauncherWorld, NumGpusAndExclude) {
  LaunchOptions o = options_no_hostfile();
  o.num_gpus = 3;
  EXPECT_EQ(discover_ok(o, probe_with(4)).hosts, (Resources{{"localhost", {0, 1, 2}}}));
  o.num_gpus = 5;
  EXPECT_NE(discover_error(o, probe_with(4)).find("4 visible GPU"), std::string::npos);
  LaunchOptions e = options_no_hostfile();
  e.exclude = "localhost:1";
  EXPECT_EQ(discover_ok(e, probe_with(3)).hosts, (Resources{{"localhost", {0, 2}}}));
}

TEST(LauncherWorld, NoGpuAndNoNumProcsSaysWhatToDo) {
  std::string m = discover_error(options_no_hostfile(), probe_with(0));
  EXPECT_NE(m.find("no GPU resources available"), std::string::npos) << m;
  EXPECT_NE(m.find("--num_procs N"), std::string::npos) << m;
}

TEST(LauncherWorld, NumProcsRunsCpuRanksWithoutCountingGpus) {
  LaunchOptions o = options_no_hostfile();
  o.num_procs = 3;
  MachineProbe p = probe_with(0, "0");
  p.cuda_device_count = [] {
    ADD_FAILURE() << "GPUs counted for --num_procs";
    return 0;
  };
  WorldInfo w = discover_ok(o, p);
  EXPECT_EQ(w.hosts, (Resources{{"localhost", {0, 1, 2}}}));
  EXPECT_EQ(w.kind, SlotKind::kCpu);
}

TEST(LauncherWorld, CountFlagsWithIncludeOrExcludeAreAnError) {
  for (int which = 0; which < 3; ++which) {
    LaunchOptions o = options_no_hostfile();
    o.include = "localhost";
    if (which == 0) o.num_gpus = 1;
    if (which == 1) o.num_nodes = 1;
    if (which == 2) o.num_procs = 1;
    EXPECT_NE(discover_error(o, probe_with(2))
                  .find("Cannot specify num_nodes/gpus with "
                        "include/exclude"),
              std::string::npos);
  }
  LaunchOptions e = options_no_hostfile();
  e.exclude = "localhost:0";
  e.num_gpus = 1;
  EXPECT_NE(discover_error(e, probe_with(2)).find("Cannot specify"), std::string::npos);
}

TEST(LauncherWorld, IncludeAndExcludeTogetherIsAnError) {
  LaunchOptions o = options_no_hostfile();
  o.include = "localhost:0";
  o.exclude = "localhost:1";
  EXPECT_NE(discover_error(o, probe_with(2)).find("mutually exclusive"), std::string::npos);
}

TEST(LauncherWorld, NumNodesAboveOneWithoutHostfile) {
  LaunchOptions o = options_no_hostfile();
  o.num_nodes = 2;
  EXPECT_NE(discover_error(o, probe_with(2))
                .find("Num nodes is >1 but no extra nodes available "
                      "via hostfile"),
            std::string::npos);
}

TEST(LauncherWorld, HostfileSlotsWithFilter) {
  HostfileTemp hf("# one machine\nlocalhost slots=4\n");
  LaunchOptions o = options_no_hostfile();
  o.hostfile = hf.path();
  o.hostfile_given = true;
  o.include = "localhost:1,3";
  MachineProbe p = probe_with(0);  // a hostfile needs no GPU count
  WorldInfo w = discover_ok(o, p);
  EXPECT_EQ(w.hosts, (Resources{{"localhost", {1, 3}}}));
  EXPECT_EQ(w.kind, SlotKind::kGpu);
}

TEST(LauncherWorld, DefaultHostfileIsUsedWhenItExists) {
  HostfileTemp hf("box slots=2\n");
  LaunchOptions o = options_no_hostfile();
  o.hostfile = hf.path();  // as if /job/hostfile existed; hostfile_given stays false
  EXPECT_EQ(discover_ok(o, probe_with(0)).hosts, (Resources{{"box", {0, 1}}}));
}

TEST(LauncherWorld, GivenHostfileMustExist) {
  LaunchOptions o = options_no_hostfile();
  o.hostfile_given = true;
  EXPECT_NE(discover_error(o, probe_with(2)).find("/nonexistent/zt/job/hostfile"),
            std::string::npos);
}

TEST(LauncherWorld, ARemoteHostIsAMultiNodeJob) {
  HostfileTemp hf("worker-7 slots=2\n");
  LaunchOptions o = options_no_hostfile();
  o.hostfile = hf.path();
  o.hostfile_given = true;
  WorldInfo w = discover_ok(o, probe_with(0));
  EXPECT_EQ(w.hosts, (Resources{{"worker-7", {0, 1}}}));
  EXPECT_EQ(w.local, (std::vector<bool>{false}));
  EXPECT_TRUE(w.master_addr.empty());  // the runner asks worker-7 (`hostname -I`)
  EXPECT_TRUE(world_multi_node(w, o));
}

TEST(LauncherWorld, SeveralHostsInHostfileOrderAndFilters) {
  // DeepSpeed: hosts keep the hostfile's order (it fixes the ranks); -i/-e and --num_nodes pick.
  HostfileTemp hf("worker-1 slots=2\nlocalhost slots=4\n10.0.0.9 slots=1\n");
  LaunchOptions o = options_no_hostfile();
  o.hostfile = hf.path();
  o.hostfile_given = true;
  MachineProbe p = probe_with(0);
  p.local_addresses = {"127.0.0.1", "10.0.0.9"};
  WorldInfo w = discover_ok(o, p);
  EXPECT_EQ(w.hosts,
            (Resources{{"worker-1", {0, 1}}, {"localhost", {0, 1, 2, 3}}, {"10.0.0.9", {0}}}));
  EXPECT_EQ(w.local, (std::vector<bool>{false, true, true}));  // a name, then an address of it
  EXPECT_EQ(w.kind, SlotKind::kGpu);
  EXPECT_TRUE(world_multi_node(w, o));
  o.include = "localhost:1,3@worker-1:0";
  EXPECT_EQ(discover_ok(o, p).hosts, (Resources{{"worker-1", {0}}, {"localhost", {1, 3}}}));
  o.include = "";
  o.exclude = "worker-1";
  EXPECT_EQ(discover_ok(o, p).hosts, (Resources{{"localhost", {0, 1, 2, 3}}, {"10.0.0.9", {0}}}));
  LaunchOptions n = options_no_hostfile();
  n.hostfile = hf.path();
  n.hostfile_given = true;
  n.num_nodes = 2;
  n.num_gpus = 1;
  EXPECT_EQ(discover_ok(n, p).hosts, (Resources{{"worker-1", {0}}, {"localhost", {0}}}));
  n.num_nodes = 4;
  EXPECT_NE(discover_error(n, p).find("lists 3 host(s)"), std::string::npos);
  // Filtered to this machine alone: one local host, not multi-node, 127.0.0.1.
  LaunchOptions one = options_no_hostfile();
  one.hostfile = hf.path();
  one.hostfile_given = true;
  one.include = "localhost";
  WorldInfo w1 = discover_ok(one, p);
  EXPECT_FALSE(world_multi_node(w1, one));
  EXPECT_EQ(w1.master_addr, "127.0.0.1");
  one.force_multi = true;
  EXPECT_TRUE(world_multi_node(w1, one));
}

TEST(LauncherWorld, NumProcsWithAHostfileMeansCpuRanksOnEachHost) {
  HostfileTemp hf("a slots=4\nb slots=2\n");
  LaunchOptions o = options_no_hostfile();
  o.hostfile = hf.path();
  o.hostfile_given = true;
  o.num_procs = 2;
  WorldInfo w = discover_ok(o, probe_with(0));
  EXPECT_EQ(w.hosts, (Resources{{"a", {0, 1}}, {"b", {0, 1}}}));
  EXPECT_EQ(w.kind, SlotKind::kCpu);
  o.num_procs = 3;  // more than b's slots=2
  EXPECT_NE(discover_error(o, probe_with(0)).find("host b has 2 slot(s)"), std::string::npos);
  LaunchOptions c = options_no_hostfile();
  c.num_procs = 2;
  c.num_gpus = 2;
  EXPECT_NE(discover_error(c, probe_with(2)).find("exclude each other"), std::string::npos);
}

TEST(LauncherWorld, ExcludingEverythingIsAnError) {
  LaunchOptions o = options_no_hostfile();
  o.exclude = "localhost";
  EXPECT_NE(discover_error(o, probe_with(2)).find("no slot is left"), std::string::npos);
}

TEST(LauncherWorld, MasterAddrGivenIsKept) {
  LaunchOptions o = options_no_hostfile();
  o.num_procs = 1;
  o.master_addr = "10.1.2.3";
  EXPECT_EQ(discover_ok(o, probe_with(0)).master_addr, "10.1.2.3");
}

TEST(LauncherWorld, LocalProbeKnowsThisMachine) {
  MachineProbe p = machine_probe_local();
  ASSERT_GE(p.local_host_names.size(), 3u);
  EXPECT_EQ(p.local_host_names[0], "localhost");
  EXPECT_EQ(p.local_host_names[1], "127.0.0.1");
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_EQ(p.local_host_names[2], name);
}

TEST(LauncherWorld, SlotListString) {
  EXPECT_EQ(slot_list_str({0, 2, 3}), "0,2,3");
  EXPECT_EQ(slot_list_str({}), "");
}

}  // namespace
}  // namespace zt::launcher
