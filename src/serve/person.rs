//! TODO person: a stand-in for `crate::person` (written on main by the lead) with its API, so
//! the web view is written against it; deleted when main is merged.

use crate::error::{Error, Result};
use crate::git::Repo;

pub(crate) struct Question {
    pub(crate) text: String,
    pub(crate) asked_at: String,
    pub(crate) iteration: u32,
}

/// The loop in `repo`'s work tree waits for a person on this question (None when not).
pub(crate) fn open_question(_repo: &Repo) -> Option<Question> {
    None
}

/// Answer the open question (Err when none is open).
pub(crate) fn answer(_repo: &Repo, _text: &str) -> Result<()> {
    Err(Error::user("no question is open"))
}

/// Leave a note for the loop's next prompt (once).
pub(crate) fn hint(_repo: &Repo, _text: &str) -> Result<()> {
    Err(Error::user("hints are not available in this build"))
}
