// Words that travel through a shell: the remote command of an ssh/pdsh runner is one string that
// the remote sshd hands to the user's shell, so every word of it (paths, PROGRAM's arguments,
// environment values) is quoted here and reaches the other side byte for byte, never executed.
// Host names go on ssh/pdsh/mpirun command lines where a leading '-' would be an option, so they
// are checked instead of quoted. --launcher_args is split into words as DeepSpeed splits it
// (Python's shlex.split), then passed as argv, never through a shell.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::launcher {

// One word for a POSIX shell (sh, bash, dash, zsh in sh mode): left bare when it holds only
// characters no shell treats specially ([A-Za-z0-9_@%+=:,./-], not empty, and not NAME=... that a
// shell would read as an assignment); otherwise wrapped in single quotes, each ' written as '\''.
// Every byte, newlines and non-ASCII included, comes back unchanged.
std::string shell_quote(std::string_view word);

// The words quoted and joined by single spaces: a command line a shell splits back into exactly
// `words`.
std::string shell_join(const std::vector<std::string>& words);

// Splits a string into words as Python's shlex.split (POSIX mode, no comments) does, which is how
// DeepSpeed reads --launcher_args: whitespace separates words; '...' is literal; "..." keeps its
// text, a backslash there escaping only '"' and '\'; outside quotes a backslash escapes the next
// character. `flag` names the source in errors ("--launcher_args").
Result<std::vector<std::string>> shell_split(std::string_view text, std::string_view flag);

// Refuses a host name that a shell or ssh/pdsh/mpirun could read as something else: empty, longer
// than 255 bytes, starting with '-' (an option), or holding anything but letters, digits and
// . - _ : % @ (IPv6 addresses and user@host included). `where` names its source for the message
// ("hostfile /job/hostfile line 3"); may be empty.
Status host_name_check(std::string_view host, std::string_view where = {});

// The text with control characters as \xNN, so a message that quotes it stays one line.
std::string printable(std::string_view text);

}  // namespace zt::launcher
