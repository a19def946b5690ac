//! The claims this machine's queues hold on a tracker of its own (beads: no leases on origin),
//! journaled in ralph's state directory: written when an item is claimed, struck when it is
//! released or closed. An entry whose queue is gone — killed, or its release refused by the
//! tracker — is an item claimed for ever; the next queue on the repository releases it before
//! it takes anything (SPEC §15: "a step that failed is finished by the next worker").

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::git::Repo;
use crate::state::StateHome;

/// The journal's file in the repository's records.
const FILE: &str = "queue-claims.json";
/// The most the journal may hold (a few hundred bytes an item).
const MAX: u64 = 4 * 1024 * 1024;

/// One claim: the item and the queue process that holds it (pid and start time: a pid the
/// kernel reused is not the queue).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Claim {
    pub(super) id: String,
    pub(super) pid: i32,
    pub(super) start: u64,
}

/// The journal of one repository's claims.
pub(super) struct Claims {
    path: PathBuf,
}

impl Claims {
    /// The repository's journal; `None` without a state directory (nothing is journaled).
    pub(super) fn open(repo: &Repo) -> Result<Option<Claims>> {
        let Some(home) = StateHome::locate() else {
            return Ok(None);
        };
        let dir = home
            .repo(repo.git2().commondir())
            .map_err(|e| Error::file("create directory", home.path(), e))?;
        Ok(Some(Claims {
            path: dir.join(FILE),
        }))
    }

    /// Item `name` (`id`) is claimed by this process.
    pub(super) fn add(&self, name: &str, id: &str) -> Result<()> {
        let me = crate::proc::tree::read(std::process::id() as i32);
        let claim = Claim {
            id: id.to_string(),
            pid: std::process::id() as i32,
            start: me.map_or(0, |p| p.start),
        };
        self.change(|all| {
            all.insert(name.to_string(), claim);
        })
    }

    /// Item `name` is no longer claimed.
    pub(super) fn strike(&self, name: &str) -> Result<()> {
        self.change(|all| {
            all.remove(name);
        })
    }

    /// The claims whose queue process is gone: (loop name, the claim).
    pub(super) fn orphans(&self) -> Result<Vec<(String, Claim)>> {
        Ok(self
            .read()?
            .into_iter()
            .filter(|(_, c)| {
                crate::proc::tree::read(c.pid).is_none_or(|p| p.zombie || p.start != c.start)
            })
            .collect())
    }

    /// Read, change and write the journal under its lock (queues of one repository may run at
    /// once).
    fn change(&self, f: impl FnOnce(&mut BTreeMap<String, Claim>)) -> Result<()> {
        let lock_path = self.path.with_extension("lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::file("open", &lock_path, e))?;
        lock.lock()
            .map_err(|e| Error::file("lock", &lock_path, e))?;
        let mut all = self.read()?;
        f(&mut all);
        let text = serde_json::to_string_pretty(&all)
            .map_err(|e| Error::user(format!("cannot write the queue's claims: {e}")))?;
        crate::state::write_atomic(&self.path, text.as_bytes())
    }

    fn read(&self) -> Result<BTreeMap<String, Claim>> {
        let bytes = match crate::files::read_bytes(&self.path, MAX) {
            Ok(b) => b,
            Err(_) if !self.path.exists() => return Ok(BTreeMap::new()),
            Err(e) => return Err(Error::user(e.to_string())),
        };
        // A journal ralph cannot read is set aside, never trusted: its items are the tracker's
        // to say.
        Ok(serde_json::from_slice(&bytes).unwrap_or_default())
    }
}
