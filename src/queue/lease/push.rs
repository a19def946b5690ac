//! One atomic push of a lease change and the refs that go with it: what origin must have for
//! each, and what `git push --porcelain` says came of it.

use crate::error::Error;

/// The item's branch pushed with a lease change: its local tip, and what origin must have now
/// (`None`: no such branch on origin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BranchPush {
    pub(crate) branch: String,
    pub(crate) tip: String,
    pub(crate) on_origin: Option<String>,
}

impl BranchPush {
    pub(crate) fn update(&self) -> Update {
        Update {
            src: self.tip.clone(),
            dst: format!("refs/heads/{}", self.branch),
            expect: Expect::Is(self.on_origin.clone()),
        }
    }
}

/// One ref of an atomic push: `src` (a commit) to origin's `dst`.
#[derive(Debug, Clone)]
pub(crate) struct Update {
    pub(crate) src: String,
    pub(crate) dst: String,
    pub(crate) expect: Expect,
}

/// What origin must have at `dst` for an update to go in.
#[derive(Debug, Clone)]
pub(crate) enum Expect {
    /// Exactly this commit (`None`: no such ref): a compare-and-swap.
    Is(Option<String>),
    /// Anything `src` descends from: a push without force.
    FastForward,
}

/// What an atomic push came to: the refs origin refused, with git's reason (`[rejected]
/// (stale info)`, `(fetch first)`…); none when every update went in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pushed {
    pub(crate) refused: Vec<(String, String)>,
}

impl Pushed {
    /// Whether origin refused because a ref moved meanwhile (another worker was first): not
    /// what the push expected, or not a fast-forward — as opposed to a hook's or a
    /// permission's refusal, which no retry changes.
    pub(crate) fn lost(&self) -> bool {
        self.refused.iter().any(|(_, why)| moved(why))
    }

    /// The refusal as an error: the ref origin refused for its own sake, and why.
    pub(crate) fn refusal(&self, remote: &str) -> Error {
        let (dst, why) = self
            .refused
            .iter()
            .find(|(_, why)| !why.contains("atomic push failed"))
            .or(self.refused.first())
            .cloned()
            .unwrap_or_default();
        Error::user(format!("`{remote}` refused the push of {dst}: {why}"))
    }
}

/// A push refused because the ref was not what the push expected (another worker moved it):
/// refused by the client against what origin advertised, or — when two pushes race — by
/// origin's own ref transaction, which checks the old value under the ref's lock.
fn moved(why: &str) -> bool {
    [
        "stale info",
        "fetch first",
        "non-fast-forward",
        "already exists",
        "failed to update ref",
        "cannot lock ref",
        "transaction failed",
    ]
    .iter()
    .any(|m| why.contains(m))
}

/// What `git push --porcelain` did: each ref it was refused (`!`: stale, already there, not a
/// fast-forward, or the atomic push failed with another), with the reason; `None` when it
/// reached no ref at all (origin could not be reached).
pub(super) fn pushed(porcelain: &str) -> Option<Pushed> {
    let refs: Vec<Vec<&str>> = porcelain
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|f| f.len() >= 3 && f[0].chars().count() == 1)
        .collect();
    if refs.is_empty() {
        return None;
    }
    let refused = refs
        .iter()
        .filter(|f| f[0] == "!")
        .map(|f| {
            let dst = f[1].rsplit_once(':').map_or(f[1], |(_, d)| d);
            (dst.to_string(), f[2].to_string())
        })
        .collect();
    Some(Pushed { refused })
}
