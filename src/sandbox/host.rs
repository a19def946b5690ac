//! No host sockets in the sandbox (SPEC §4): `/tmp`, `/run` and `/var/run` are private (bwrap's
//! `--dev` makes `/dev/shm` private), every pathname UNIX socket the host has bound that stays
//! visible inside is covered with `/dev/null` (a read-only bind does not stop `connect()`; a
//! device refuses it), and the agent's environment drops the variables that name sockets,
//! agents and displays. Abstract sockets are `confine`'s part.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::paths::{normal, within};

/// The host directories replaced by an empty tmpfs, and what of them stays visible.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Private {
    /// `/tmp`, `/run`, and `/var/run` where it is not a link to `/run`.
    pub(crate) dirs: Vec<PathBuf>,
    /// Regular files bound back read-only: what `/etc`'s links lead to inside them
    /// (`/etc/resolv.conf` → `/run/systemd/resolve/stub-resolv.conf`: DNS keeps working).
    pub(crate) files: Vec<PathBuf>,
    /// The links at the top of `/run`, made again (target, link): `/run/shm`, NixOS's
    /// `/run/current-system`.
    pub(crate) links: Vec<(PathBuf, PathBuf)>,
}

impl Private {
    /// The host's private directories as they are now.
    pub(crate) fn of_host() -> Private {
        let mut dirs: Vec<PathBuf> = ["/tmp", "/run", "/var/run"]
            .iter()
            .filter_map(|d| Path::new(d).canonicalize().ok())
            .filter(|d| d.is_dir())
            .collect();
        dirs.dedup();
        let files = etc_targets(Path::new("/etc"), &dirs);
        let links = top_links(Path::new("/run"), &dirs);
        Private { dirs, files, links }
    }

    /// Where ralph's binary is bound for the confinement step: in the private `/run` (else
    /// `/tmp`, which every host has).
    pub(crate) fn confine_at(&self) -> PathBuf {
        let base = if self.dirs.iter().any(|d| d == Path::new("/run")) {
            "/run"
        } else {
            "/tmp"
        };
        Path::new(base).join("ralph/ralph")
    }
}

/// The regular files that `etc`'s symlinks lead to inside a private directory.
fn etc_targets(etc: &Path, private: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(etc) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
        .filter_map(|e| e.path().canonicalize().ok())
        .filter(|t| within(t, private) && t.is_file())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The symlinks directly in `dir` (when it is private), to be made again inside.
fn top_links(dir: &Path, private: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    if !private.iter().any(|d| d == dir) {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
        .filter_map(|e| Some((std::fs::read_link(e.path()).ok()?, e.path())))
        .collect();
    out.sort();
    out
}

/// What the host has, at the start of one attempt, that the sandbox must cover.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Host {
    /// Pathname sockets visible inside, to be covered with `/dev/null`.
    pub(crate) sockets: Vec<PathBuf>,
    /// Environment variables to unset.
    pub(crate) unset: Vec<OsString>,
    /// Sockets a variable kept on purpose (`sandbox_env_keep`) names: bound in, reachable.
    pub(crate) passed: Vec<PathBuf>,
    /// The secrets' files (`sandbox_hidden`, `~/.netrc`…), to be covered with `/dev/null`.
    pub(crate) hidden_files: Vec<PathBuf>,
}

/// Where the sandbox's mounts put things, for deciding what of the host stays visible.
pub(super) struct Layout<'a> {
    pub(crate) private: &'a [PathBuf],
    /// Host directories bound in (and so visible even inside a private directory).
    pub(crate) bound: &'a [PathBuf],
    pub(crate) hidden: &'a [PathBuf],
}

impl Host {
    /// The host now: its bound sockets that `layout` leaves visible, and the variables of
    /// ralph's environment and `extra` (what ralph sets for the command) that the rule drops —
    /// but those `keep` names, which pass on with the socket they name (an ssh agent's).
    pub(crate) fn now(layout: &Layout<'_>, extra: &[(String, String)], keep: &[String]) -> Host {
        let vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .chain(
                extra
                    .iter()
                    .map(|(k, v)| (OsString::from(k), OsString::from(v))),
            )
            .filter(|(k, v)| drops(k, v))
            .collect();
        let kept = |k: &OsStr| keep.iter().any(|n| OsStr::new(n) == k);
        let mut unset: Vec<OsString> = vars
            .iter()
            .filter(|(k, _)| !kept(k))
            .map(|(k, _)| k.clone())
            .collect();
        unset.sort();
        unset.dedup();
        let mut passed: Vec<PathBuf> = vars
            .iter()
            .filter(|(k, v)| kept(k) && is_socket(Path::new(v)))
            .map(|(_, v)| normal(Path::new(v)))
            .collect();
        passed.sort();
        passed.dedup();
        let sockets = bound_sockets()
            .into_iter()
            .filter(|s| visible(s, layout) && !passed.contains(s))
            .collect();
        Host {
            sockets,
            unset,
            passed,
            hidden_files: Vec::new(),
        }
    }

    /// Keep, of the paths to cover, those there now. bwrap mounts `/dev/null` over each, and
    /// over one no longer there (a socket closed, a secret removed, since listed) it would
    /// have to make the file in the read-only root and fails ("Can't create file at …", "Can't
    /// mkdir parents for …"): the sandbox would not start. Nothing there is nothing to cover.
    /// (bwrap has no `-try` for a missing destination; what vanishes after this is left to
    /// [`vanished`].)
    pub(crate) fn retain_present(&mut self) {
        let there = |p: &PathBuf| p.symlink_metadata().is_ok();
        self.sockets.retain(there);
        self.hidden_files.retain(there);
    }
}

/// Whether bwrap's error `said` is that it could not make the mount point for a path that is no
/// longer there: a socket or secret listed to be covered that vanished as the sandbox started
/// (then starting it again, listing afresh, is the answer, not a sandbox that cannot start).
pub(crate) fn vanished(said: &str) -> bool {
    said.lines().any(|line| {
        [
            "bwrap: Can't create file at ",
            "bwrap: Can't mkdir parents for ",
        ]
        .iter()
        .find_map(|p| line.trim().strip_prefix(p))
        .and_then(|rest| rest.rsplit_once(": "))
        .is_some_and(|(path, _)| {
            path.starts_with('/') && Path::new(path).symlink_metadata().is_err()
        })
    })
}

/// Whether a host path is there inside: not under a hidden directory, and not in a private one
/// unless bound in.
fn visible(p: &Path, layout: &Layout<'_>) -> bool {
    !within(p, layout.hidden) && (!within(p, layout.private) || within(p, layout.bound))
}

/// Every pathname UNIX socket bound in a network namespace ralph can see (`/proc/PID/net/unix`
/// of one process of each), that is there as a socket now. One bound elsewhere is reachable
/// through the file system all the same.
fn bound_sockets() -> BTreeSet<PathBuf> {
    let mut namespaces = BTreeSet::new();
    let mut out = BTreeSet::new();
    let pids = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| {
            n.to_str()
                .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
        });
    for pid in std::iter::once(OsString::from("self")).chain(pids) {
        let proc = Path::new("/proc").join(&pid);
        let Ok(ns) = std::fs::read_link(proc.join("ns/net")) else {
            continue;
        };
        if namespaces.insert(ns) {
            read_unix(&proc.join("net/unix"), &mut out);
        }
    }
    out.retain(|p| is_socket(p));
    out.into_iter().map(|p| normal(&p)).collect()
}

/// The absolute paths of a `net/unix` table (`Num RefCount Protocol Flags Type St Inode Path`).
fn read_unix(table: &Path, out: &mut BTreeSet<PathBuf>) {
    use std::io::Read;
    let mut text = String::new();
    let Ok(file) = std::fs::File::open(table) else {
        return;
    };
    // Bounded: a table of a million sockets is not read to the end.
    if file.take(64 << 20).read_to_string(&mut text).is_err() {
        return;
    }
    out.extend(
        text.lines()
            .skip(1)
            .filter_map(path_field)
            .filter(|p| p.starts_with('/'))
            .map(PathBuf::from),
    );
}

/// The eighth field and what follows it (a path may hold spaces).
fn path_field(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for _ in 0..7 {
        let end = rest.find(char::is_whitespace)?;
        rest = rest[end..].trim_start();
    }
    (!rest.is_empty()).then_some(rest)
}

/// The names that say a variable leads to a socket, an agent holding keys, or a display.
const DROPPED: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "WAYLAND_DISPLAY",
    "WAYLAND_SOCKET",
    "DISPLAY",
    "XAUTHORITY",
    "SESSION_MANAGER",
    "PULSE_SERVER",
    "PIPEWIRE_REMOTE",
    "NOTIFY_SOCKET",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "KRB5CCNAME",
];

/// The rule for the agent's environment: a variable goes when its name is one of [`DROPPED`],
/// ends in `SOCK` or holds `SOCKET` or `_IPC_` (`I3SOCK`, `GNOME_KEYRING_SOCKET`,
/// `VSCODE_IPC_HOOK_CLI` — not `SOCKS_PROXY`, which the agent may need for its API), or its
/// value is a UNIX socket's address (`unix:…`) or the path of one.
pub(super) fn drops(name: &OsStr, value: &OsStr) -> bool {
    let n = name.to_string_lossy().to_ascii_uppercase();
    let named = n.ends_with("SOCK") || n.contains("SOCKET") || n.contains("_IPC_");
    if DROPPED.contains(&n.as_str()) || named {
        return true;
    }
    let v = value.to_string_lossy();
    if v.starts_with("unix:") {
        return true;
    }
    v.starts_with('/') && is_socket(Path::new(value))
}

/// Whether an absolute path is a UNIX socket now (following links).
fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    p.is_absolute() && std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_drops_sockets_agents_and_displays() {
        let d = |n: &str, v: &str| drops(OsStr::new(n), OsStr::new(v));
        for n in [
            "SSH_AUTH_SOCK",
            "DOCKER_HOST",
            "DBUS_SESSION_BUS_ADDRESS",
            "GPG_AGENT_INFO",
            "XDG_RUNTIME_DIR",
            "WAYLAND_DISPLAY",
            "DISPLAY",
            "I3SOCK",
            "GNOME_KEYRING_SOCKET",
            "VSCODE_IPC_HOOK_CLI",
            "VSCODE_GIT_IPC_HANDLE",
        ] {
            assert!(d(n, "x"), "{n}");
        }
        assert!(d("MY_BUS", "unix:path=/run/user/0/bus"));
        for n in [
            "PATH",
            "HOME",
            "ANTHROPIC_API_KEY",
            "RALPH_ITERATION",
            "IS_SANDBOX",
        ] {
            assert!(!d(n, "/usr/bin"), "{n}");
        }
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(d("WHATEVER", sock.to_str().unwrap()));
        assert!(!d("WHATEVER", dir.path().to_str().unwrap()));
    }

    #[test]
    fn a_socket_this_process_binds_is_found_and_visibility_follows_the_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let sock = normal(&dir.path().join("found.sock"));
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(bound_sockets().contains(&sock));
        let private = [dir.path().canonicalize().unwrap()];
        let none: [PathBuf; 0] = [];
        assert!(!visible(
            &sock,
            &Layout {
                private: &private,
                bound: &none,
                hidden: &none
            }
        ));
        let host = Host::now(
            &Layout {
                private: &none,
                bound: &none,
                hidden: &none,
            },
            &[],
            &[],
        );
        assert!(host.sockets.contains(&sock));
        let bound = [private[0].clone()];
        assert!(visible(
            &sock,
            &Layout {
                private: &private,
                bound: &bound,
                hidden: &none
            }
        ));
        assert!(!visible(
            &sock,
            &Layout {
                private: &none,
                bound: &none,
                hidden: &bound
            }
        ));
    }

    #[test]
    fn kept_variables_stay_with_their_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = normal(&dir.path().join("agent.sock"));
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let extra = [("SSH_AUTH_SOCK".to_string(), sock.display().to_string())];
        let none: [PathBuf; 0] = [];
        let layout = Layout {
            private: &none,
            bound: &none,
            hidden: &none,
        };
        let host = Host::now(&layout, &extra, &[]);
        assert!(host.unset.contains(&OsString::from("SSH_AUTH_SOCK")));
        assert!(host.sockets.contains(&sock) && host.passed.is_empty());
        let host = Host::now(&layout, &extra, &["SSH_AUTH_SOCK".to_string()]);
        assert!(!host.unset.contains(&OsString::from("SSH_AUTH_SOCK")));
        assert!(!host.sockets.contains(&sock));
        assert_eq!(host.passed, vec![sock]);
    }

    #[test]
    fn what_etc_links_into_a_private_directory_is_bound_back_and_its_links_made_again() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (etc, run) = (root.join("etc"), root.join("run"));
        std::fs::create_dir_all(run.join("resolve")).unwrap();
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            run.join("resolve/stub-resolv.conf"),
            "nameserver 127.0.0.53\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("../run/resolve/stub-resolv.conf", etc.join("resolv.conf"))
            .unwrap();
        std::os::unix::fs::symlink("/usr/share/zoneinfo/UTC", etc.join("localtime")).unwrap();
        std::os::unix::fs::symlink("/dev/shm", run.join("shm")).unwrap();
        let private = [run.clone()];
        assert_eq!(
            etc_targets(&etc, &private),
            vec![run.join("resolve/stub-resolv.conf")]
        );
        assert_eq!(
            top_links(&run, &private),
            vec![(PathBuf::from("/dev/shm"), run.join("shm"))]
        );
        assert!(top_links(&run, &[]).is_empty());
    }

    #[test]
    fn the_unix_table_yields_absolute_paths_only() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("unix");
        std::fs::write(
            &t,
            "Num       RefCount Protocol Flags    Type St Inode Path\n\
             0000: 00000002 00000000 00010000 0001 01 83873 /run/a b.sock\n\
             0000: 00000002 00000000 00010000 0001 01 83872 @abstract\n\
             0000: 00000003 00000000 00000000 0001 03  1075\n\
             0000: 00000002 00000000 00010000 0001 01 83871 rel.sock\n",
        )
        .unwrap();
        let mut out = BTreeSet::new();
        read_unix(&t, &mut out);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec![PathBuf::from("/run/a b.sock")]
        );
    }

    /// Only bwrap's word that it could not make a mount point for a path gone now is a
    /// vanished one: a path still there (a real refusal) or another error is not.
    #[test]
    fn vanished_is_a_missing_mount_point_of_a_path_gone_now() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let ro = ": Read-only file system";
        assert!(vanished(&format!(
            "bwrap: Can't create file at {d}/gone.sock{ro}"
        )));
        assert!(vanished(&format!(
            "bwrap: Can't mkdir parents for {d}/gone/s: Read-only file system\n"
        )));
        assert!(!vanished(&format!("bwrap: Can't create file at {d}{ro}")));
        assert!(!vanished(&format!(
            "bwrap: Can't find source path {d}/gone{ro}"
        )));
        assert!(!vanished("bwrap: Can't create file at gone: x"));
        assert!(!vanished("agent: Can't create file at /nowhere: x"));
    }
}
