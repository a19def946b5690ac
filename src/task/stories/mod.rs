//! `prd.json`, the story file of the snarktank Ralph (SPEC §14): the stories, the one the next
//! iteration works (the lowest `priority` among those not passing), and the document kept whole
//! — unknown keys and their order — so that writing back changes only what ralph means to.

mod guard;
mod prompt;

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

pub(crate) use guard::guard;
pub(crate) use prompt::{Turn, story_prompt};

/// The file name ralph looks for.
pub(crate) const FILE: &str = "prd.json";
/// Where the snarktank layout keeps it, when not at the root.
pub(crate) const NESTED: &str = "scripts/ralph/prd.json";
/// The agent's memory beside it.
pub(crate) const PROGRESS_FILE: &str = "progress.txt";
/// Failed attempts after which a story is skipped.
pub(crate) const MAX_ATTEMPTS: u32 = 3;

/// One user story, as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Story {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) description: String,
    pub(crate) criteria: Vec<String>,
    /// `None` sorts after every story that has one.
    pub(crate) priority: Option<f64>,
    pub(crate) passes: bool,
    pub(crate) notes: String,
}

/// The story file: the stories, and the document as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stories {
    /// `project` (or `productName`), for the task name.
    pub(crate) project: String,
    /// `branchName`, as written.
    pub(crate) branch: Option<String>,
    pub(crate) description: String,
    pub(crate) stories: Vec<Story>,
    /// The whole document, unknown keys in their order, for writing back.
    pub(crate) doc: Value,
}

/// The shape ralph needs; serde reports where a file strays from it (line and column).
#[derive(Deserialize)]
struct Shape {
    #[serde(default)]
    project: Option<String>,
    #[serde(default, rename = "productName")]
    product_name: Option<String>,
    #[serde(default, rename = "branchName")]
    branch_name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(rename = "userStories")]
    user_stories: Vec<StoryShape>,
}

#[derive(Deserialize)]
struct StoryShape {
    id: Id,
    title: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "acceptanceCriteria")]
    acceptance_criteria: Vec<String>,
    #[serde(default)]
    priority: Option<f64>,
    #[serde(default)]
    passes: bool,
    #[serde(default)]
    notes: Option<String>,
}

/// A story id: `"US-001"`, or a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Text(String),
    Number(i64),
}

/// Read a story file; errors name the file and, where there is one, the line.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Stories, String> {
    let at = |line: usize, what: &str| format!("{}:{line}: {what}", path.display());
    let shape: Shape = serde_json::from_str(text).map_err(|e| {
        // serde_json's message ends "at line L column C"; say it the way every other file is.
        let msg = e.to_string();
        let msg = msg
            .rsplit_once(" at line ")
            .map_or(msg.as_str(), |(m, _)| m)
            .to_string();
        at(e.line(), &format!("not a story file: {msg}"))
    })?;
    let doc: Value = serde_json::from_str(text).map_err(|e| at(e.line(), &e.to_string()))?;
    let mut stories = Vec::with_capacity(shape.user_stories.len());
    for s in shape.user_stories {
        let id = match s.id {
            Id::Text(t) => t.trim().to_string(),
            Id::Number(n) => n.to_string(),
        };
        if id.is_empty() {
            return Err(at(line_of(text, "\"id\"", 0), "a story has an empty `id`"));
        }
        if stories.iter().any(|x: &Story| x.id == id) {
            return Err(at(
                line_of(text, &format!("{:?}", id), 1),
                &format!("two stories have the id `{id}`: each story needs its own"),
            ));
        }
        stories.push(Story {
            id,
            title: s.title.trim().to_string(),
            description: s.description.unwrap_or_default(),
            criteria: s.acceptance_criteria,
            priority: s.priority,
            passes: s.passes,
            notes: s.notes.unwrap_or_default(),
        });
    }
    if stories.is_empty() {
        return Err(at(
            line_of(text, "\"userStories\"", 0),
            "`userStories` is empty: nothing to work",
        ));
    }
    Ok(Stories {
        project: shape
            .project
            .or(shape.product_name)
            .unwrap_or_default()
            .trim()
            .to_string(),
        branch: shape.branch_name.filter(|b| !b.trim().is_empty()),
        description: shape.description.unwrap_or_default(),
        stories,
        doc,
    })
}

/// The 1-based line of the `nth` (0-based) occurrence of `needle`, else line 1.
fn line_of(text: &str, needle: &str, nth: usize) -> usize {
    text.match_indices(needle)
        .nth(nth)
        .map_or(1, |(i, _)| text[..i].matches('\n').count() + 1)
}

impl Stories {
    /// The title a run shows: the project, else the description, else the file's name.
    pub(crate) fn name(&self) -> String {
        [&self.project, &self.description]
            .into_iter()
            .find(|s| !s.trim().is_empty())
            .map(|s| s.lines().next().unwrap_or_default().trim().to_string())
            .unwrap_or_else(|| "user stories".to_string())
    }

    pub(crate) fn passing(&self) -> usize {
        self.stories.iter().filter(|s| s.passes).count()
    }

    pub(crate) fn story(&self, id: &str) -> Option<&Story> {
        self.stories.iter().find(|s| s.id == id)
    }

    /// The story the next iteration works: the lowest priority among those not passing and not
    /// `skipped`, the file's order breaking ties (a story without a priority comes last).
    pub(crate) fn next<'a>(&'a self, skipped: &[String]) -> Option<&'a Story> {
        self.stories
            .iter()
            .filter(|s| !s.passes && !skipped.contains(&s.id))
            .min_by(|a, b| {
                let key = |s: &Story| s.priority.unwrap_or(f64::INFINITY);
                key(a).total_cmp(&key(b))
            })
    }

    /// Set a story's `passes` in the document and the stories alike.
    pub(crate) fn set_passes(&mut self, id: &str, passes: bool) {
        if let Some(s) = self.stories.iter_mut().find(|s| s.id == id) {
            s.passes = passes;
        }
        if let Some(v) = story_value_mut(&mut self.doc, id) {
            v.insert("passes".to_string(), Value::Bool(passes));
        }
    }

    /// The document as ralph writes it: two-space JSON, as the snarktank tools write it, and a
    /// final newline.
    pub(crate) fn render(&self) -> String {
        let mut text = serde_json::to_string_pretty(&self.doc).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// A story's id as the document has it (string or number), as text.
fn id_of(story: &serde_json::Map<String, Value>) -> Option<String> {
    match story.get("id")? {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The stories of a document, as JSON objects.
fn story_values(doc: &Value) -> impl Iterator<Item = &serde_json::Map<String, Value>> {
    doc.get("userStories")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

fn story_value_mut<'a>(
    doc: &'a mut Value,
    id: &str,
) -> Option<&'a mut serde_json::Map<String, Value>> {
    doc.get_mut("userStories")?
        .as_array_mut()?
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|s| id_of(s).as_deref() == Some(id))
}

#[cfg(test)]
mod tests;
