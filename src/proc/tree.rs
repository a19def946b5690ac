//! A process's descendants, read from `/proc`, and signals that reach exactly the process that
//! was seen: each one is named by its pid *and* its start time, and signalled through a pidfd
//! opened and checked against that start time, so a pid the kernel reused is never signalled.
//!
//! Linux only; elsewhere there is no tree to read and [`descendants`] is empty (the guard then
//! falls back to the agent's process group alone).

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proc {
    pub(crate) pid: i32,
    pub(crate) ppid: i32,
    pub(crate) pgid: i32,
    /// Clock ticks since boot at which it started: with the pid, its identity.
    pub(crate) start: u64,
    /// Exited and not yet reaped.
    pub(crate) zombie: bool,
}

/// Parse `/proc/PID/stat`. The command name (field 2) is parenthesised and may hold spaces and
/// parentheses itself, so the fields are counted from its last `)`.
pub(crate) fn parse_stat(stat: &str) -> Option<Proc> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let pid = stat[..open].trim().parse().ok()?;
    // Fields 3.. : state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime stime cutime cstime priority nice num_threads itrealvalue starttime …
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    Some(Proc {
        pid,
        ppid: rest.get(1)?.parse().ok()?,
        pgid: rest.get(2)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
        zombie: matches!(*rest.first()?, "Z" | "X"),
    })
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;

    use rustix::process::{Pid, PidfdFlags, Signal};

    use super::{Proc, parse_stat};

    /// One process, read now; `None` once it is gone.
    pub(crate) fn read(pid: i32) -> Option<Proc> {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(parse_stat)
    }

    /// Every process `/proc` shows now.
    fn all() -> Vec<Proc> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(read)
            .collect()
    }

    /// Every descendant of `root` alive or unreaped now, parents before their children.
    pub(crate) fn descendants(root: i32) -> Vec<Proc> {
        let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
        for p in all() {
            children.entry(p.ppid).or_default().push(p);
        }
        let mut found = Vec::new();
        let mut next = vec![root];
        while let Some(parent) = next.pop() {
            for c in children.remove(&parent).unwrap_or_default() {
                next.push(c.pid);
                found.push(c);
            }
        }
        found
    }

    /// Send `sig` to `p` if it is still the process that was seen (same pid, same start time).
    /// Returns whether it was signalled.
    pub(crate) fn signal(p: &Proc, sig: Signal) -> bool {
        let Some(pid) = Pid::from_raw(p.pid) else {
            return false;
        };
        let still = || read(p.pid).is_some_and(|now| now.start == p.start);
        match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
            // The descriptor names one process for good: if the pid still shows the same start
            // time now, the descriptor is the process that was seen.
            Ok(fd) => still() && rustix::process::pidfd_send_signal(&fd, sig).is_ok(),
            // Gone (then `still` says no), or no pidfds (a kernel older than 5.3): check, then
            // signal, with a window of a few instructions in which the pid could be reused.
            Err(_) => still() && rustix::process::kill_process(pid, sig).is_ok(),
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use rustix::process::Signal;

    use super::Proc;

    pub(crate) fn read(_pid: i32) -> Option<Proc> {
        None
    }

    pub(crate) fn descendants(_root: i32) -> Vec<Proc> {
        Vec::new()
    }

    pub(crate) fn signal(_p: &Proc, _sig: Signal) -> bool {
        false
    }
}

pub(crate) use imp::{descendants, read, signal};

#[cfg(test)]
mod tests {
    use super::imp::read;
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 99 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 10 18446744073709551615";
        let p = parse_stat(line).unwrap();
        assert_eq!(
            p,
            Proc {
                pid: 4242,
                ppid: 17,
                pgid: 4242,
                start: 987654,
                zombie: false
            }
        );
        let z = parse_stat("7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0").unwrap();
        assert!(z.zombie);
        assert_eq!(z.start, 55);
        assert!(parse_stat("").is_none());
        assert!(parse_stat("12 (x) S").is_none());
        assert!(parse_stat("x (y) S 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 5").is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_is_a_descendant_and_is_signalled_only_as_itself() {
        use rustix::process::Signal;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let me = std::process::id() as i32;
        let p = descendants(me)
            .into_iter()
            .find(|p| p.pid == pid)
            .expect("the child is a descendant");
        assert_eq!(p.ppid, me);
        // A different start time is another process: not signalled.
        let impostor = Proc {
            start: p.start + 1,
            ..p
        };
        assert!(!signal(&impostor, Signal::KILL));
        assert!(read(pid).is_some_and(|now| !now.zombie), "still running");
        assert!(signal(&p, Signal::KILL));
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(Signal::KILL.as_raw()));
        assert!(!signal(&p, Signal::KILL), "gone: nothing to signal");
    }
}
