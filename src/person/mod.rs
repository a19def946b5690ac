//! A person in the loop (SPEC §16): the agent's question, a person's answer and a person's
//! hints, kept in the work tree's records in ralph's state directory (`StateHome::tree`), where
//! an agent under `--sandbox` cannot write — so no agent answers its own question or leaves
//! itself a "person's" note. The agent's one door is `.ralph/question.md` in its work tree,
//! which `ralph ask` writes and ralph reads after the iteration ([`take_asked`]): a regular
//! file only, opened following no link, bounded, its text shown escaped wherever it is shown.

mod elsewhere;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::git::Repo;
use crate::state::{self, StateHome};
pub(crate) use elsewhere::{Elsewhere, Replies, bounded, relay};

/// The variable naming the file `ralph ask` writes: set for an agent whose run takes questions.
pub(crate) const QUESTION_FILE_VAR: &str = "RALPH_QUESTION_FILE";
/// Set for an agent whose run takes no questions (`--no-questions`).
pub(crate) const NO_QUESTIONS_VAR: &str = "RALPH_NO_QUESTIONS";

/// The agent's question, in `.ralph/` of its work tree (`ralph ask` writes it).
pub(crate) const ASKED: &str = "question.md";
/// The most of a question ralph keeps (characters); the rest is cut, marked `…`.
pub(crate) const MAX_QUESTION: usize = 4000;
/// The most a person's answer or hint may hold (bytes).
pub(crate) const MAX_WORDS: usize = 16 * 1024;

/// The most hints one prompt carries.
const MAX_HINTS: usize = 32;

const QUESTION: &str = "question.json";
const ANSWER: &str = "answer.json";
const HINTS: &str = "hints";

/// A question the agent asked, waiting for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Question {
    pub(crate) text: String,
    pub(crate) asked_at: String,
    /// The iteration whose agent asked it.
    pub(crate) iteration: u32,
}

/// A person's words: an answer to the open question, or a hint for the next prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Words {
    pub(crate) text: String,
    pub(crate) at: String,
}

/// One work tree's desk: where its question, answer and hints are kept.
#[derive(Debug, Clone)]
pub(crate) struct Desk {
    dir: PathBuf,
}

impl Desk {
    /// The desk of `repo`'s work tree, made when missing (a run, `ralph answer`, `ralph hint`).
    pub(crate) fn open(repo: &Repo) -> Result<Desk> {
        let home = StateHome::locate().ok_or_else(no_home)?;
        let keyed = home
            .tree(repo.root(), repo.git2().path())
            .map_err(|e| Error::file("create", home.path(), e))?;
        Ok(Desk {
            dir: keyed.join("person"),
        })
    }

    /// The desk of `repo`'s work tree when it exists (a reader: `status`, the web view).
    pub(crate) fn find(repo: &Repo) -> Option<Desk> {
        let keyed = StateHome::locate()?.find_tree(repo.root(), repo.git2().path())?;
        Some(Desk {
            dir: keyed.join("person"),
        })
    }

    /// The desk of the work tree at `work_tree` when it exists, found from its path alone
    /// (`ralph watch`, the web view: what they watch).
    pub(crate) fn find_at(work_tree: &Path) -> Option<Desk> {
        let keyed = StateHome::locate()?.records_of(work_tree, false).ok()??;
        Some(Desk {
            dir: keyed.join("person"),
        })
    }

    /// The directory (watched by a loop that waits, and by the web view).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The open question, if any.
    pub(crate) fn question(&self) -> Option<Question> {
        read_json(&self.dir.join(QUESTION))
    }

    /// The answer given to the open question, if any.
    pub(crate) fn answer(&self) -> Option<Words> {
        read_json(&self.dir.join(ANSWER))
    }

    /// Record `q` as the open question (a former one and its answer are replaced).
    pub(crate) fn ask(&self, q: &Question) -> Result<()> {
        self.remove(ANSWER);
        self.write(QUESTION, q)
    }

    /// Answer the open question; an error when none is open, or when it is answered already:
    /// of two people answering at once the first answer stands, whole, and the second is told
    /// (never one answer silently replacing the other).
    pub(crate) fn give_answer(&self, text: &str) -> Result<()> {
        let text = words(text, "answer")?;
        if self.question().is_none() {
            return Err(Error::user("no question is open for this loop")
                .with_hint("`ralph status --all` shows which loop waits for a person"));
        }
        let body = serde_json::to_vec(&Words {
            text,
            at: state::now_rfc3339(),
        })
        .map_err(|e| Error::user(format!("cannot write the answer: {e}")))?;
        self.write_new(ANSWER, &body)
    }

    /// `name` made holding `body` only when nothing is there yet: written whole under a name of
    /// its own, then linked to `name` (`link(2)` never replaces a file).
    fn write_new(&self, name: &str, body: &[u8]) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        state::create_private_dir(&self.dir)?;
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.{}", random_hex()?));
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(body))
            .and_then(|()| std::fs::hard_link(&tmp, &path));
        let _ = std::fs::remove_file(&tmp);
        match made {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let given = self.answer().map(|a| a.text).unwrap_or_default();
                Err(Error::user(format!(
                    "this question is answered already; the loop takes that answer: {}",
                    crate::ui::shown(&given)
                ))
                .with_hint("to add to it, leave a hint: `ralph hint NAME \"TEXT\"`"))
            }
            Err(e) => Err(Error::file("write", &path, e)),
        }
    }

    /// Leave a hint for the next prompt.
    pub(crate) fn give_hint(&self, text: &str) -> Result<()> {
        let text = words(text, "hint")?;
        let dir = self.dir.join(HINTS);
        state::create_private_dir(&dir)?;
        // One prompt carries them all: bounded, as a prompt is.
        let waiting = std::fs::read_dir(&dir).map_or(0, |d| d.count());
        if waiting >= MAX_HINTS {
            return Err(Error::user(format!(
                "{waiting} hints wait for this loop's next prompt already, the most it takes"
            ))
            .with_hint("let an iteration start, or say it in fewer hints"));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let name = format!("{now:024}-{}.json", random_hex()?);
        let body = serde_json::to_vec(&Words {
            text,
            at: state::now_rfc3339(),
        })
        .map_err(|e| Error::user(format!("cannot write the hint: {e}")))?;
        let path = dir.join(name);
        crate::files::write_atomic(&path, &body, 0o600).map_err(|e| Error::file("write", &path, e))
    }

    /// The open question and its answer, taken off the desk (for the next prompt).
    pub(crate) fn take_answered(&self) -> Option<(Question, Words)> {
        let q = self.question()?;
        let a = self.answer()?;
        Some((q, a))
    }

    /// The hints left, oldest first (for the next prompt; removed by [`Desk::clear`]).
    pub(crate) fn hints(&self) -> Vec<(PathBuf, Words)> {
        let Ok(entries) = std::fs::read_dir(self.dir.join(HINTS)) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .filter_map(|p| read_json(&p).map(|w| (p, w)))
            .collect()
    }

    /// Remove what a prompt took: the answered question, the hints it carried.
    pub(crate) fn clear(&self, answered: bool, hints: &[PathBuf]) {
        if answered {
            self.remove(ANSWER);
            self.remove(QUESTION);
        }
        for h in hints {
            let _ = std::fs::remove_file(h);
        }
    }

    /// Close the open question unanswered (a new run starts); the question it was.
    pub(crate) fn drop_question(&self) -> Option<Question> {
        let q = self.question()?;
        self.clear(true, &[]);
        Some(q)
    }

    fn write(&self, name: &str, v: &impl Serialize) -> Result<()> {
        state::create_private_dir(&self.dir)?;
        let path = self.dir.join(name);
        let body = serde_json::to_vec(v)
            .map_err(|e| Error::user(format!("cannot write {}: {e}", path.display())))?;
        crate::files::write_atomic(&path, &body, 0o600).map_err(|e| Error::file("write", &path, e))
    }

    fn remove(&self, name: &str) {
        let _ = std::fs::remove_file(self.dir.join(name));
    }
}

/// The loop in `repo`'s work tree waits on this question (`None`: it does not).
pub(crate) fn open_question(repo: &Repo) -> Option<Question> {
    Desk::find(repo)?.question()
}

/// Answer the question the loop in `repo`'s work tree waits on.
pub(crate) fn answer(repo: &Repo, text: &str) -> Result<()> {
    Desk::open(repo)?.give_answer(text)
}

/// Leave a note for the next prompt of the loop in `repo`'s work tree.
pub(crate) fn hint(repo: &Repo, text: &str) -> Result<()> {
    Desk::open(repo)?.give_hint(text)
}

/// The question the agent left in `.ralph/question.md` of `root`, removed: read beneath `root`
/// following no link, a regular file of at most 1 MiB of UTF-8 (else refused, and removed too);
/// trimmed and cut to [`MAX_QUESTION`] characters. `Ok(None)` when it asked nothing.
pub(crate) fn take_asked(root: &Path) -> std::result::Result<Option<String>, String> {
    let path = root.join(state::DIR).join(ASKED);
    let read = crate::files::read_text_unlinked(root, &path);
    let _ = std::fs::remove_file(&path);
    match read {
        Ok(text) => Ok(question_text(&text)),
        Err(e) if e.is_missing() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// A question's text as ralph keeps it: trimmed, at most [`MAX_QUESTION`] characters.
fn question_text(text: &str) -> Option<String> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    let mut kept: String = t.chars().take(MAX_QUESTION).collect();
    if kept.len() < t.len() {
        kept.push('…');
    }
    Some(kept)
}

/// A person's words, checked: not empty, at most [`MAX_WORDS`] bytes.
fn words(text: &str, what: &str) -> Result<String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(Error::user(format!("the {what} is empty")));
    }
    if t.len() > MAX_WORDS {
        return Err(Error::user(format!(
            "the {what} is {} bytes, more than the {MAX_WORDS} a prompt takes",
            t.len()
        )));
    }
    Ok(t.to_string())
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = crate::files::read_bytes(path, 2 * MAX_WORDS as u64 + 4096).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// 6 random bytes, hex: a name of its own for a file of the desk.
fn random_hex() -> Result<String> {
    let mut id = [0u8; 6];
    getrandom::fill(&mut id).map_err(|e| Error::user(format!("no randomness: {e}")))?;
    Ok(id.iter().map(|x| format!("{x:02x}")).collect())
}

fn no_home() -> Error {
    Error::user("ralph has no state directory (neither XDG_STATE_HOME nor HOME is set)")
        .with_hint("set HOME: questions and hints live in ralph's state directory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_is_trimmed_and_cut() {
        assert_eq!(question_text("  \n "), None);
        assert_eq!(question_text(" Which DB?\n").as_deref(), Some("Which DB?"));
        let long = "é".repeat(MAX_QUESTION + 10);
        let kept = question_text(&long).unwrap();
        assert_eq!(kept.chars().count(), MAX_QUESTION + 1);
        assert!(kept.ends_with('…'));
    }

    #[test]
    fn words_must_say_something_and_fit_a_prompt() {
        assert!(words("  ", "answer").is_err());
        assert!(words(&"x".repeat(MAX_WORDS + 1), "hint").is_err());
        assert_eq!(words(" yes ", "answer").unwrap(), "yes");
    }

    #[test]
    fn an_answer_needs_an_open_question_and_hints_come_oldest_first() {
        let d = tempfile::tempdir().unwrap();
        let desk = Desk {
            dir: d.path().join("person"),
        };
        assert!(desk.give_answer("postgres").is_err(), "no question open");
        desk.ask(&Question {
            text: "Which DB?".into(),
            asked_at: "t".into(),
            iteration: 1,
        })
        .unwrap();
        assert!(desk.take_answered().is_none());
        desk.give_answer("postgres").unwrap();
        let second = desk.give_answer("mysql").unwrap_err().to_string();
        assert!(
            second.contains("answered already") && second.contains("postgres"),
            "{second}"
        );
        let (q, a) = desk.take_answered().unwrap();
        assert_eq!(
            (q.text.as_str(), a.text.as_str()),
            ("Which DB?", "postgres")
        );
        desk.give_hint("first").unwrap();
        desk.give_hint("second").unwrap();
        let hints = desk.hints();
        let texts: Vec<&str> = hints.iter().map(|(_, w)| w.text.as_str()).collect();
        assert_eq!(texts, ["first", "second"]);
        let paths: Vec<PathBuf> = hints.into_iter().map(|(p, _)| p).collect();
        desk.clear(true, &paths);
        assert!(desk.question().is_none() && desk.hints().is_empty());
    }
}
