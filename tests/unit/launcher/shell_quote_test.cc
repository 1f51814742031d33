// Quoting against a real shell as the oracle: a command line built by shell_join, run by /bin/sh
// (and bash when installed), must hand the program exactly the words it was built from, hostile
// ones included. shell_split against the outputs Python's shlex.split documents (DeepSpeed splits
// --launcher_args with it).
#include "zt/launcher/shell_quote.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace zt::launcher {
namespace {

const std::vector<std::string>& hostile_words() {
  static const std::vector<std::string> words = {
      "plain",
      "",
      "two words",
      "$(touch /tmp/zt_shell_quote_pwned)",
      "`id`",
      "'single'",
      "\"double\"",
      "it's",
      "'\\''",
      "back\\slash",
      "line1\nline2",
      "tab\there",
      "-n",
      "--flag=$HOME",
      "FOO=bar",
      "~",
      "~root",
      "*",
      "?",
      "[a]",
      "a;b|c&d",
      "<in >out",
      "#comment",
      "{a,b}",
      "!bang",
      "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac",  // UTF-8
      "\x01\x7f\xff",
      "trailing\\",
      "%s",
  };
  return words;
}

// Runs `command` with `shell -c` and returns what it wrote to stdout.
std::string shell_output(const std::string& shell, const std::string& command) {
  int fds[2];
  if (pipe(fds) != 0) return "<pipe failed>";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execl(shell.c_str(), shell.c_str(), "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << shell << " -c " << command;
  return out;
}

// The words a shell hands printf, each followed by a NUL.
std::vector<std::string> words_seen_by(const std::string& shell, const std::string& args) {
  std::string out = shell_output(shell, "printf '%s\\0' " + args);
  std::vector<std::string> words;
  size_t start = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\0') {
      words.push_back(out.substr(start, i - start));
      start = i + 1;
    }
  }
  return words;
}

std::vector<std::string> shells() {
  std::vector<std::string> found = {"/bin/sh"};
  for (const char* s : {"/bin/bash", "/bin/dash"}) {
    if (access(s, X_OK) == 0) found.push_back(s);
  }
  return found;
}

TEST(ShellQuote, EveryHostileWordReachesTheProgramUnchanged) {
  unlink("/tmp/zt_shell_quote_pwned");
  for (const std::string& shell : shells()) {
    for (const std::string& w : hostile_words()) {
      std::vector<std::string> seen = words_seen_by(shell, shell_quote(w));
      ASSERT_EQ(seen.size(), 1u) << shell << ": " << shell_quote(w);
      EXPECT_EQ(seen[0], w) << shell << ": " << shell_quote(w);
    }
    std::vector<std::string> seen = words_seen_by(shell, shell_join(hostile_words()));
    EXPECT_EQ(seen, hostile_words()) << shell;
  }
  EXPECT_NE(access("/tmp/zt_shell_quote_pwned", F_OK), 0) << "a quoted word was executed";
}

// ssh hands the remote command to the user's shell, which may start another `sh -c`: quoting
// twice must survive two shells.
TEST(ShellQuote, SurvivesTwoShells) {
  std::string inner = "printf '%s\\0' " + shell_join(hostile_words());
  std::string out = shell_output("/bin/sh", shell_join({"/bin/sh", "-c", inner}));
  std::string expected;
  for (const std::string& w : hostile_words()) expected += w + std::string(1, '\0');
  EXPECT_EQ(out, expected);
}

TEST(ShellQuote, SafeWordsStayBare) {
  EXPECT_EQ(shell_quote("--master_port=29500"), "--master_port=29500");
  EXPECT_EQ(shell_quote("/usr/bin/zt"), "/usr/bin/zt");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  // A first word NAME=VALUE would be an assignment, not a command.
  EXPECT_EQ(shell_quote("FOO=bar"), "'FOO=bar'");
  std::string out = shell_output("/bin/sh", shell_join({"FOO=bar"}) + " 2>/dev/null; echo $?");
  EXPECT_EQ(out, "127\n") << "the shell ran FOO=bar as a command";
}

TEST(ShellSplit, MatchesShlexSplit) {
  struct Case {
    const char* text;
    std::vector<std::string> words;
  };
  const Case cases[] = {
      {"a b  c", {"a", "b", "c"}},
      {"'x y' z", {"x y", "z"}},
      {R"("a\"b" c)", {"a\"b", "c"}},
      {R"("a\nb")", {"a\\nb"}},
      {R"(a\ b)", {"a b"}},
      {"''", {""}},
      {"\"\" x", {"", "x"}},
      {"--mca btl_tcp_if_include lo -x \"FOO=a b\"",
       {"--mca", "btl_tcp_if_include", "lo", "-x", "FOO=a b"}},
      {"a'b'c", {"abc"}},
      {"#x y", {"#x", "y"}},
      {"", {}},
      {"  \t\n ", {}},
  };
  for (const Case& c : cases) {
    Result<std::vector<std::string>> got = shell_split(c.text, "--launcher_args");
    ASSERT_TRUE(got.is_ok()) << c.text << ": " << got.status().message();
    EXPECT_EQ(*got, c.words) << c.text;
  }
}

TEST(ShellSplit, UnbalancedQuotesAreErrorsNamingTheFlag) {
  for (const char* text : {"\"abc", "'x", "x\\"}) {
    Result<std::vector<std::string>> got = shell_split(text, "--launcher_args");
    ASSERT_FALSE(got.is_ok()) << text;
    EXPECT_NE(got.status().message().find("--launcher_args"), std::string::npos);
  }
}

TEST(HostNameCheck, AcceptsHostNamesAndAddresses) {
  for (const char* host : {"worker-0", "node07.cluster.local", "10.77.0.2", "fe80::1%eth0",
                           "user@gpu3", "localhost", "my_host"}) {
    EXPECT_TRUE(host_name_check(host).is_ok()) << host;
  }
}

TEST(HostNameCheck, RefusesOptionsAndShellCharactersNamingTheSource) {
  for (const char* host :
       {"-oProxyCommand=touch /tmp/x", "-p", "a b", "a;b", "$(id)", "`id`", "h'x", "h\"x", "h\\x",
        "a|b", "a&b", "a>b", "*", "h?", "~h", "a\nb", "a,b", "h/x", ""}) {
    Status s = host_name_check(host, "hostfile /tmp/hf line 3");
    ASSERT_FALSE(s.is_ok()) << host;
    EXPECT_NE(s.message().find("hostfile /tmp/hf line 3"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << "not one line: " << s.message();
  }
  EXPECT_FALSE(host_name_check(std::string(256, 'a')).is_ok());
}

}  // namespace
}  // namespace zt::launcher
