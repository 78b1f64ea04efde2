// ownership_test.cpp: squatted segments. /dev/shm is writable by every
// user, so a user can create a key's file before its service does. Real
// uids: root (the test process), nobody, and bare uids without a passwd
// entry, set with setgid/setuid in forked children. Root refuses a segment
// another user made unless told to trust that user, and leaves it byte for
// byte as it was; root's segments are trusted by everyone; a group shares a
// 0660 segment; an ACL that lets another user write does not get a segment
// past the check; inspect() reads any of them without writing.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "shm/layout.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
constexpr gid_t kSharedGroup = 64998;

bool become(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  return ::setgroups(groups.size(), groups.data()) == 0 && ::setgid(gid) == 0 &&
         ::setuid(uid) == 0 && ::geteuid() == uid;
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

template <class T>
T read_at(const std::string& bytes, std::size_t offset) {
  T v{};
  if (offset + sizeof v <= bytes.size()) std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

// Whether every attached holder of the segment at `path` has armed its
// lifeline. A process's lifeline thread does that after attach() returns,
// and so writes to the segment then, whoever else reads it.
bool lifelines_armed(const std::string& path) {
  using namespace detail::layout;
  const std::string bytes = contents(path);
  const auto slots = read_at<std::uint32_t>(bytes, offsetof(segment_header, holder_slots));
  if (slots == 0) return false;
  for (std::uint32_t i = 0; i < slots; ++i) {
    const std::size_t record = kHoldersOffset + i * sizeof(holder_record);
    if (read_at<std::uint32_t>(bytes, record + offsetof(holder_record, state)) == kHolderAttached &&
        read_at<std::uint32_t>(bytes, record + offsetof(holder_record, lifeline_state)) !=
            kLifelineArmed)
      return false;
  }
  return true;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A POSIX ACL in the kernel's xattr form (linux/posix_acl_xattr.h): a
// version word, then (tag, permissions, id) entries, little-endian.
struct acl_entry {
  std::uint16_t tag;
  std::uint16_t perm;
  std::uint32_t id;
};
constexpr std::uint16_t kAclUserObj = 0x01, kAclUser = 0x02, kAclGroupObj = 0x04, kAclGroup = 0x08,
                        kAclMask = 0x10, kAclOther = 0x20;
constexpr std::uint32_t kAclNoId = 0xffffffff;

std::string acl_bytes(const std::vector<acl_entry>& entries) {
  std::string out(4, '\0');
  out[0] = 2;  // POSIX_ACL_XATTR_VERSION
  for (const acl_entry& e : entries) out.append(reinterpret_cast<const char*>(&e), sizeof e);
  return out;
}

// The ACL of mode 0600 plus `extra` entries, with a mask that lets them act.
std::string acl_granting(const std::vector<acl_entry>& extra) {
  std::vector<acl_entry> e{{kAclUserObj, 6, kAclNoId},
                           {kAclGroupObj, 0, kAclNoId},
                           {kAclMask, 6, kAclNoId},
                           {kAclOther, 0, kAclNoId}};
  e.insert(e.end(), extra.begin(), extra.end());
  // The kernel wants the entries in the order of their tags.
  std::stable_sort(e.begin(), e.end(),
                   [](const acl_entry& a, const acl_entry& b) { return a.tag < b.tag; });
  return acl_bytes(e);
}

bool set_acl(const std::string& path, const char* name, const std::string& acl) {
  return ::setxattr(path.c_str(), name, acl.data(), acl.size(), 0) == 0;
}

// `uid` creates `key` with `capacity` seats and `mode` in a child of its own.
void create_as(uid_t uid, gid_t gid, const std::string& key, int capacity, mode_t mode,
               std::vector<gid_t> groups = {}) {
  test::child_process creator([&] {
    if (!become(uid, gid, groups)) return 10;
    Options o;
    o.mode = mode;
    Semaphore sem = Semaphore::open(key, capacity, o);
    return sem.capacity() == capacity ? 0 : 11;
  });
  ASSERT_EQ(creator.wait(), 0);
  struct stat st;
  ASSERT_EQ(::stat(Semaphore::segment_path(key).c_str(), &st), 0);
  ASSERT_EQ(st.st_uid, uid);
  ASSERT_EQ(st.st_mode & 0777, mode);
}

class Ownership : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) SHMSEM_SKIP_WITHOUT_CAPABILITY("needs root to switch users");
  }
};

TEST_F(Ownership, RootRefusesASegmentNobodyCreatedAndLeavesItUntouched) {
  test::unique_key key;
  create_as(kNobody, kNogroup, key.str(), 100, 0666);
  const std::string path = Semaphore::segment_path(key);
  const std::string before = contents(path);
  for (int call = 0; call < 2; ++call) {
    try {
      if (call == 0) Semaphore::open(key, 2);
      if (call == 1) Semaphore::attach(key);
      FAIL() << "root accepted a segment nobody made (call " << call << ")";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::untrusted_owner) << e.what();
      EXPECT_EQ(e.code(), std::errc::permission_denied);
      const std::string what = e.what();
      for (const std::string& part :
           {key.str(), path, std::string("nobody"), std::string("uid 65534"),
            std::string("mode 0666"), std::string("trusted_owners"), std::string("--trust-owner")})
        EXPECT_TRUE(contains(what, part)) << "'" << part << "' missing from: " << what;
    }
  }
  EXPECT_EQ(contents(path), before) << "the refused segment was written to";
  // Nobody still finds its semaphore as it made it.
  test::child_process check([&] {
    if (!become(kNobody, kNogroup)) return 10;
    Semaphore sem = Semaphore::attach(key);
    return sem.capacity() == 100 && sem.used() == 0 ? 0 : 11;
  });
  EXPECT_EQ(check.wait(), 0);
}

TEST_F(Ownership, ASquattedKeyDoesNotSwitchOffAFailOpenBound) {
  test::unique_key key;
  create_as(kNobody, kNogroup, key.str(), 100, 0666);
  Service svc;
  int ran = 0;
  auto f = bounded({.key = key.str(), .permits = 1, .service = &svc}, [&] { ++ran; });
  try {
    f();
    FAIL() << "the function ran without a bound on nobody's segment";
  } catch (const AcquisitionError& e) {
    EXPECT_EQ(e.reason(), Reason::error) << e.what();
  }
  EXPECT_EQ(ran, 0);
  // A segment that cannot be opened for another cause (here a directory
  // where its file belongs) still fails open.
  test::unique_key other;
  const std::string dir = Semaphore::segment_path(other);
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  auto g = bounded({.key = other.str(), .permits = 1, .service = &svc}, [&] { ++ran; });
  EXPECT_TRUE(g());
  ::rmdir(dir.c_str());
  EXPECT_EQ(ran, 1);
}

TEST_F(Ownership, RootAttachesWhenItTrustsTheOwnerOnPurpose) {
  test::unique_key key;
  create_as(kNobody, kNogroup, key.str(), 100, 0666);
  for (const std::string owner : {"nobody", "65534"}) {
    Options o;
    o.trusted_owners = {"root", owner};  // an entry that does not match comes first
    Semaphore sem = Semaphore::open(key, 2, o);
    EXPECT_EQ(sem.capacity(), 100) << owner;  // the existing capacity stands
    EXPECT_TRUE(sem.acquire().is_held());
    EXPECT_TRUE(sem.snapshot().owner.trusted);
    EXPECT_EQ(sem.snapshot().owner.user, "nobody");
  }
  EXPECT_THROW(Semaphore::open(key, 2, {.trusted_owners = {""}}), std::invalid_argument);
  try {
    Semaphore::attach(key, {.trusted_owners = {"no-such-user-here", "nobody"}});
    FAIL() << "a trusted owner that is no user was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-user-here'"), std::string::npos) << e.what();
  }
}

TEST_F(Ownership, AHandleOpenedWithTrustDoesNotLendItToAnOpenWithout) {
  test::unique_key key;
  create_as(kNobody, kNogroup, key.str(), 3, 0666);
  Semaphore trusted = Semaphore::open(key, 3, {.trusted_owners = {"nobody"}});
  try {
    Semaphore::attach(key);
    FAIL() << "a second handle without the opt-in shared the trusted attachment";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::untrusted_owner);
  }
}

TEST_F(Ownership, NobodyAttachesToRootsWorldWritableSegment) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2, {.mode = 0666});
  test::child_process nobody([&] {
    if (!become(kNobody, kNogroup)) return 10;
    Semaphore s = Semaphore::attach(key);
    Permit p = s.acquire();
    return p.is_held() && s.snapshot().owner.trusted ? 0 : 11;
  });
  EXPECT_EQ(nobody.wait(), 0);
}

TEST_F(Ownership, AUserRefusesAnotherUsersWorldWritableSegment) {
  test::unique_key key;
  create_as(64011, 64011, key.str(), 5, 0666);
  test::child_process other([&] {
    if (!become(64012, 64012)) return 10;
    try {
      Semaphore::attach(key);
      return 11;
    } catch (const SegmentError& e) {
      if (e.code() != errc::untrusted_owner) return 12;
      if (!contains(e.what(), "uid 64011")) return 13;  // no passwd entry: the uid alone
    }
    Semaphore s = Semaphore::attach(key, {.trusted_owners = {"64011"}});
    return s.capacity() == 5 ? 0 : 14;
  });
  EXPECT_EQ(other.wait(), 0);
}

TEST_F(Ownership, AGroupSharesA0660SegmentAndOutsidersAreRefusedAsBefore) {
  test::unique_key key;
  create_as(64021, kSharedGroup, key.str(), 2, 0660);
  struct stat st;
  ASSERT_EQ(::stat(Semaphore::segment_path(key).c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, kSharedGroup);
  // Another member (through a supplementary group): not o+w, so trusted.
  test::child_process member([&] {
    if (!become(64022, 64022, {kSharedGroup})) return 10;
    Semaphore s = Semaphore::attach(key);
    Permit p = s.acquire();
    return p.is_held() && s.snapshot().owner.trusted ? 0 : 11;
  });
  EXPECT_EQ(member.wait(), 0);
  test::child_process outsider([&] {
    if (!become(64023, 64023)) return 10;
    try {
      Semaphore::attach(key);
      return 11;
    } catch (const SegmentError& e) {
      return e.code() == errc::permission_denied ? 0 : 12;
    }
  });
  EXPECT_EQ(outsider.wait(), 0);
  // Root trusts no user's segment by default, the group's included.
  EXPECT_THROW(
      {
        try {
          Semaphore::attach(key);
        } catch (const SegmentError& e) {
          EXPECT_EQ(e.code(), errc::untrusted_owner);
          throw;
        }
      },
      SegmentError);
  EXPECT_NO_THROW(Semaphore::attach(key, {.trusted_owners = {"64021"}}));
}

TEST_F(Ownership, InspectReadsAnUntrustedSegmentWithoutWritingToIt) {
  test::unique_key key;
  test::pipe_channel held, go;
  // Nobody's holder: a lease for the copy to show, and a live token.
  test::child_process holder([&] {
    if (!become(kNobody, kNogroup)) return 10;
    Semaphore s = Semaphore::open(key, 100, {.mode = 0666});
    Permit p = s.acquire(3);
    held.send();
    go.receive();
    return 0;
  });
  ASSERT_EQ(held.receive(), '.');
  const std::string path = Semaphore::segment_path(key);
  ASSERT_TRUE(test::eventually([&] { return lifelines_armed(path); }));
  const std::string before = contents(path);
  const Snapshot s = Semaphore::inspect(key);
  EXPECT_EQ(contents(path), before) << "inspect() wrote to the segment";
  EXPECT_EQ(s.capacity, 100);
  EXPECT_EQ(s.used, 3);
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_EQ(s.holders[0].pid, holder.pid());
  EXPECT_EQ(s.holders[0].state, HolderState::alive);
  EXPECT_EQ(s.owner.uid, kNobody);
  EXPECT_EQ(s.owner.user, "nobody");
  EXPECT_EQ(s.owner.mode, 0666u);
  EXPECT_FALSE(s.owner.trusted);
  EXPECT_TRUE(s.name_still_points_here);
  EXPECT_TRUE(Semaphore::inspect(key, {.trusted_owners = {"nobody"}}).owner.trusted);
  // inspect() does not attach: the segment counts as unused once nobody's
  // holder is gone, while we keep reading it.
  const auto users = Semaphore::users(key);
  ASSERT_EQ(users.size(), 1u);
  EXPECT_EQ(users[0].pid, holder.pid());
  EXPECT_EQ(users[0].seats, 3);
  EXPECT_TRUE(users[0].attached);
  go.send();
  EXPECT_EQ(holder.wait(), 0);
  EXPECT_TRUE(Semaphore::users(key).empty());
  EXPECT_EQ(Semaphore::inspect(key).used, 0);
  EXPECT_TRUE(Semaphore::remove_if_unused(key));
}

TEST_F(Ownership, OwnerIsKnownEvenWhenTheSegmentCannotBeRead) {
  test::unique_key key;
  create_as(64031, 64031, key.str(), 1, 0600);
  test::child_process other([&] {
    if (!become(64032, 64032)) return 10;
    try {
      Semaphore::inspect(key);
      return 11;
    } catch (const SegmentError& e) {
      if (e.code() != errc::permission_denied) return 12;
    }
    const SegmentOwner o = Semaphore::owner(key);
    return o.uid == 64031 && o.user.empty() && o.mode == 0600 ? 0 : 13;
  });
  EXPECT_EQ(other.wait(), 0);
}

TEST_F(Ownership, ANewSegmentGetsExactlyTheModeAskedForWhateverTheUmask) {
  test::unique_key key;
  test::child_process creator([&] {
    if (!become(64041, 64041)) return 10;
    ::umask(0077);
    Semaphore s = Semaphore::open(key, 1, {.mode = 0640});
    struct stat st;
    if (::stat(Semaphore::segment_path(key).c_str(), &st) != 0) return 11;
    return st.st_uid == 64041 && (st.st_mode & 07777) == 0640 ? 0 : 12;
  });
  EXPECT_EQ(creator.wait(), 0);
}

// The repro of a squat past the mode check: nobody's 0600 file, with an ACL
// entry that lets one named user read and write it. That user can open the
// file, so only the check can refuse it.
TEST_F(Ownership, AUserRefusesASegmentWhoseAclLetsItWriteSomeoneElsesFile) {
  constexpr uid_t kVictim = 64051;
  for (const acl_entry grant :
       {acl_entry{kAclUser, 6, kVictim}, acl_entry{kAclGroup, 6, kVictim}}) {
    test::unique_key key;
    create_as(kNobody, kNogroup, key.str(), 100, 0600);
    const std::string path = Semaphore::segment_path(key);
    // What the owner can do to its own file (root does it for nobody here).
    ASSERT_TRUE(set_acl(path, "system.posix_acl_access", acl_granting({grant})))
        << "tmpfs without POSIX ACLs: " << std::strerror(errno);
    test::child_process victim([&] {
      if (!become(kVictim, kVictim)) return 10;
      try {
        Semaphore s = Semaphore::open(key, 2);
        return s.capacity() == 100 ? 11 : 12;  // 11: the squatter's segment was accepted
      } catch (const SegmentError& e) {
        if (e.code() != errc::untrusted_owner) return 13;
        if (!contains(e.what(), path) || !contains(e.what(), "ACL")) return 14;
      }
      if (Semaphore::owner(key).trusted) return 16;  // the verdict shown is the same
      // Trusting the owner on purpose still works.
      Semaphore s = Semaphore::open(key, 2, {.trusted_owners = {"nobody"}});
      return s.capacity() == 100 ? 0 : 15;
    });
    EXPECT_EQ(victim.wait(), 0) << "11: the ACL got nobody's segment past the check (tag "
                                << grant.tag << ")";
  }
}

TEST_F(Ownership, AnAclWhoseMaskTakesWriteAwayIsNoGrant) {
  test::unique_key key;
  create_as(64053, 64053, key.str(), 3, 0640);
  const std::string path = Semaphore::segment_path(key);
  ASSERT_TRUE(set_acl(path, "system.posix_acl_access",
                      acl_bytes({{kAclUserObj, 6, kAclNoId},
                                 {kAclUser, 6, 64054},
                                 {kAclGroupObj, 4, kAclNoId},
                                 {kAclMask, 4, kAclNoId},
                                 {kAclOther, 0, kAclNoId}})));
  // A member of the file's group reads it as before (inspect() needs no write).
  test::child_process reader([&] {
    if (!become(64055, 64053)) return 10;
    return Semaphore::owner(key).trusted ? 0 : 11;
  });
  EXPECT_EQ(reader.wait(), 0);
}

// A default ACL on the directory is inherited into the access ACL of every
// file created in it. The library's own files get only the mode asked for:
// the creator drops the inherited entries. /dev/shm is shared with every
// other test, so this one mounts a private one (a mount namespace of a
// child of its own).
TEST_F(Ownership, ADefaultAclOnDevShmIsNotInheritedBySegments) {
  test::child_process world([&] {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0)
      return 20;
    if (!set_acl("/dev/shm", "system.posix_acl_default",
                 acl_bytes({{kAclUserObj, 6, kAclNoId},
                            {kAclUser, 6, 64062},
                            {kAclGroupObj, 0, kAclNoId},
                            {kAclMask, 6, kAclNoId},
                            {kAclOther, 0, kAclNoId}})))
      return 21;
    const std::string key = "acl.default." + std::to_string(::getpid());
    test::child_process creator([&] {
      if (!become(64061, 64061)) return 10;
      Semaphore s = Semaphore::open(key, 1, {.mode = 0600});
      const std::string path = Semaphore::segment_path(key);
      char buf[256];
      if (::getxattr(path.c_str(), "system.posix_acl_access", buf, sizeof buf) >= 0) return 11;
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 || (st.st_mode & 07777) != 0600) return 12;
      return 0;
    });
    if (creator.wait() != 0) return 1;
    // The user the directory's default named cannot open the file at all.
    test::child_process named([&] {
      if (!become(64062, 64062)) return 10;
      try {
        Semaphore::open(key, 1);
        return 11;
      } catch (const SegmentError& e) {
        return e.code() == errc::permission_denied ? 0 : 12;
      }
    });
    const int n = named.wait();
    return n == 0 ? 0 : 30 + n;
  });
  const int status = world.wait();
  if (status == 20) SHMSEM_SKIP_WITHOUT_CAPABILITY("cannot mount a private /dev/shm (unshare -m)");
  if (status == 21) SHMSEM_SKIP_WITHOUT_CAPABILITY("this tmpfs has no POSIX ACLs");
  EXPECT_EQ(status, 0) << "1: the new segment kept the inherited ACL or another mode; 41: the "
                          "user named in the default ACL opened it";
}

// The token files are named after a nonce that anyone who can read the
// segment can see. Another user who plants a token file at such a name,
// before anyone made it, could hold locks in it that keep dead holders
// alive for ever: the file does not hold the segment's secret, so it is
// never used, and the holders take their tokens in a file of their own.
TEST_F(Ownership, ATokenFilePlantedByAnotherUserIsNeverTrusted) {
  test::unique_key key;
  // An open makes the first token file, so the segment is made by a process
  // that then lets go; a token file in which no token is held may be swept
  // at any time (docs/design.md, "Liveness"), and is here, so the squatter
  // finds the name free, as it would after such a sweep.
  test::child_process creator([&] {
    Options o;
    o.mode = 0644;  // readable by all, as for a monitor
    Semaphore::open(key, 2, o);
    return 0;
  });
  ASSERT_EQ(creator.wait(), 0);
  std::uint64_t nonce = 0;
  {
    const int fd = ::open(Semaphore::segment_path(key).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, &nonce, sizeof nonce, 304), 8);  // segment_header::token_nonce
    ::close(fd);
  }
  char name[80];
  std::snprintf(name, sizeof name, "/dev/shm/shmsem-tokens.%016llx.0",
                static_cast<unsigned long long>(nonce));
  const std::string planted = name;
  ASSERT_EQ(::unlink(planted.c_str()), 0) << planted;
  test::child_process squatter([&] {
    if (!become(65534, 65534)) return 10;
    const int fd = ::open(planted.c_str(), O_CREAT | O_EXCL | O_RDWR, 0666);
    if (fd < 0) return 11;
    ::fchmod(fd, 0666);
    if (::write(fd, "squatted", 8) != 8) return 12;
    ::close(fd);
    return 0;
  });
  ASSERT_EQ(squatter.wait(), 0);
  Semaphore sem = Semaphore::attach(key);
  Permit p = sem.acquire(1, {.wait_timeout = 10s});
  EXPECT_TRUE(p.is_held());
  const int fd = sem.inheritable_liveness_fd();
  char target[256] = {};
  ASSERT_GT(::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target - 1),
            0);
  ::close(fd);
  EXPECT_NE(std::string(target), planted) << "the holder took its token in the planted file";
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].state, HolderState::alive);
  ::unlink(planted.c_str());
}

}  // namespace
}  // namespace shmsem
