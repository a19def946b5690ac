//! An item's work published where the tracker's readers see it (SPEC §15), in atomic pushes
//! that carry the item's lease, so a worker whose lease was taken over publishes nothing:
//! without `--pr`, the queue's base branch after the item's merge — origin's base merged in
//! first when it moved, never forced, a few tries, a conflict or a base that moved at every
//! try the item's halt (and nothing changed here); with `--pr`, the item's branch before its pull request is opened.

use super::desk::{Desk, Mine, Team};
use super::keeper::push_of;
use crate::error::{Error, Result};
use crate::git::Repo;
use crate::queue::lease::{BranchPush, Expect, Moved, Next, Pushed, Stage, Update};

/// A base branch push is tried this many times when origin's base moved meanwhile.
const TRIES: usize = 3;

/// What publishing an item came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Published {
    /// On origin's base branch at this commit (the lease says so), or its branch pushed.
    Done(String),
    /// Origin's base moved and conflicts with the item's work in these files: the local base
    /// is back where it was before the item's merge.
    Conflict(Vec<String>),
    /// Another worker took the item's lease over: nothing was published.
    Lost,
    /// Origin's base moved on each try (a busy repository): nothing was published; the
    /// local base is back where it was. Another try later may well go in.
    Busy,
    /// Origin's item branch is at this commit, which the worker's branch lacks (pushed by
    /// someone not holding the lease): nothing was published.
    Diverged(String),
}

/// Without `--pr`: the base branch (the item merged into it, `before` its tip before that
/// merge) pushed to origin with the item's branch and its lease (`merged`), in one atomic push.
pub(super) fn merged(desk: &mut Desk, name: &str, before: &str) -> Result<Published> {
    let base = desk
        .base
        .clone()
        .ok_or_else(|| Error::user("the queue has no base branch to publish"))?;
    // The item's branch as origin has it when its agent pushed it there itself.
    let mut caught: Option<BranchPush> = None;
    for _ in 0..TRIES {
        let Some(team) = &mut desk.team else {
            return Ok(Published::Done(tip(&desk.repo, &base)?));
        };
        let mine = team.mine.get(name).cloned().unwrap_or_default();
        let at = tip(&desk.repo, &base)?;
        let branch = match &caught {
            Some(b) => Some(b.clone()),
            None => push_of(desk.repo.cli(), name, &mine)?,
        };
        let tip = branch
            .as_ref()
            .map(|b| b.tip.clone())
            .or(mine.branch.clone());
        let next = Next::held(Stage::Merged)
            .with_commit(&at)
            .on_branch(tip.as_deref())
            .on_text(mine.text.as_deref());
        let written = Some(std::time::Instant::now());
        let (lease, oid) = team.leases.lease_update(name, Some(&mine.oid), &next)?;
        let mut updates = vec![lease];
        updates.extend(branch.as_ref().map(|b| b.update()));
        updates.push(Update {
            src: at.clone(),
            dst: format!("refs/heads/{base}"),
            expect: Expect::FastForward,
        });
        let pushed = team.leases.push(&updates)?;
        if pushed.refused.is_empty() {
            let branch = branch.map(|b| b.tip).or(mine.branch);
            let stage = Some(Stage::Merged);
            let mine = Mine {
                oid,
                stage,
                branch,
                written,
                text: mine.text.clone(),
            };
            team.mine.insert(name.to_string(), mine);
            return Ok(Published::Done(at));
        }
        match after_refusal(&pushed, team, name, &mine.oid, branch.as_ref())? {
            Then::Catch(b) => {
                caught = Some(b);
                continue;
            }
            Then::Merge => {}
            Then::End(end) => {
                reset_base(&desk.repo, &base, before, desk.ui)?;
                return end;
            }
        }
        team.seen = team.leases.look(&base)?;
        let upstream = format!("refs/remotes/{}/{base}", team.leases.remote());
        if let Err(conflicts) = merge_upstream(&desk.repo, &base, &upstream, desk.ui)? {
            reset_base(&desk.repo, &base, before, desk.ui)?;
            return Ok(Published::Conflict(conflicts));
        }
    }
    reset_base(&desk.repo, &base, before, desk.ui)?;
    Ok(Published::Busy)
}

/// What a refused publish goes on with.
enum Then {
    /// Its ending (the base branch is put back first).
    End(Result<Published>),
    /// Origin's branch moved to this worker's own work: push again, from there.
    Catch(BranchPush),
    /// Origin's base moved: merge it in and push again.
    Merge,
}

/// A refusal no retry changes (a hook's, a permission's) is an error; a ref that moved is found
/// on origin: the lease (another worker's now), the branch (caught up with when it moved to this
/// worker's own work), else the base (merged in).
fn after_refusal(
    pushed: &Pushed,
    team: &Team,
    name: &str,
    mine: &str,
    branch: Option<&BranchPush>,
) -> Result<Then> {
    if !pushed.lost() {
        return Ok(Then::End(Err(pushed.refusal(team.leases.remote()))));
    }
    Ok(match team.leases.what_moved(name, Some(mine), branch)? {
        Moved::Lease => Then::End(Ok(Published::Lost)),
        Moved::Diverged(at) => Then::End(Ok(Published::Diverged(at))),
        Moved::Branch(b) => Then::Catch(b),
        Moved::Neither => Then::Merge,
    })
}

/// With `--pr`: the item's branch pushed with its lease renewed, in one atomic push.
pub(super) fn branch(desk: &mut Desk, name: &str) -> Result<Published> {
    let Some(team) = &mut desk.team else {
        desk.repo.push_branch("origin", &format!("ralph/{name}"))?;
        return Ok(Published::Done(String::new()));
    };
    let mine = team.mine.get(name).cloned().unwrap_or_default();
    let branch = push_of(desk.repo.cli(), name, &mine)?;
    let next = Next::held(Stage::Working)
        .on_branch(mine.branch.as_deref())
        .on_text(mine.text.as_deref());
    let written = Some(std::time::Instant::now());
    match team
        .leases
        .swap(name, Some(&mine.oid), &next, branch.as_ref())?
    {
        crate::queue::lease::Swap::Won(oid) => {
            let tip = branch.map(|b| b.tip).or(mine.branch);
            team.mine.insert(
                name.to_string(),
                Mine {
                    oid,
                    stage: Some(Stage::Working),
                    branch: tip.clone(),
                    written,
                    text: mine.text.clone(),
                },
            );
            Ok(Published::Done(tip.unwrap_or_default()))
        }
        crate::queue::lease::Swap::Lost => Ok(Published::Lost),
        crate::queue::lease::Swap::Diverged(at) => Ok(Published::Diverged(at)),
    }
}

/// Branch `base`'s commit.
fn tip(repo: &Repo, base: &str) -> Result<String> {
    let out = repo.cli().run(
        &[
            "rev-parse",
            "--verify",
            &format!("refs/heads/{base}^{{commit}}"),
        ],
        None,
    )?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// Origin's base (`upstream`) merged into branch `base`: in the main work tree when it has the
/// base checked out, else by moving the ref. `Err(files)` when they conflict (nothing changed).
fn merge_upstream(
    repo: &Repo,
    base: &str,
    upstream: &str,
    ui: crate::ui::Ui,
) -> Result<std::result::Result<String, Vec<String>>> {
    let conflicts = crate::worktree::conflicts_of(repo, base, upstream)?;
    if !conflicts.is_empty() {
        return Ok(Err(conflicts));
    }
    let at = crate::worktree::merge_commit(repo, base, upstream, ui)?;
    Ok(Ok(at))
}

/// Branch `base` back at `to` (the main work tree with it when it has it checked out: clean,
/// as the queue keeps it).
fn reset_base(repo: &Repo, base: &str, to: &str, ui: crate::ui::Ui) -> Result<()> {
    if crate::worktree::current_branch(repo).as_deref() == Some(base) {
        repo.cli().run(&["reset", "--quiet", "--keep", to], None)?;
        crate::worktree::fill_lfs(repo, ui);
    } else {
        repo.cli()
            .run(&["update-ref", &format!("refs/heads/{base}"), to], None)?;
    }
    Ok(())
}
