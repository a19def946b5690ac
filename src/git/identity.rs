//! The identity ralph commits as, resolved as git resolves it: the environment, then the
//! configuration, then `ralph <ralph@localhost>`.

use super::{FALLBACK_EMAIL, FALLBACK_NAME};

/// Author and committer resolved from the environment, configuration or fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Author name.
    pub(crate) author_name: String,
    /// Author e-mail.
    pub(crate) author_email: String,
    /// Committer name.
    pub(crate) committer_name: String,
    /// Committer e-mail.
    pub(crate) committer_email: String,
    /// True when any field fell back to `ralph <ralph@localhost>`.
    pub(crate) used_fallback: bool,
}

impl Identity {
    /// Resolve the identity like git: `GIT_{AUTHOR,COMMITTER}_{NAME,EMAIL}` from `env`,
    /// then `author.*`/`committer.*`, then `user.*` from `config`, then the fallback.
    pub(crate) fn resolve(
        config: &dyn Fn(&str) -> Option<String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Identity {
        let mut used_fallback = false;
        let mut pick = |var: &str, role_key: &str, user_key: &str, fallback: &str| -> String {
            let found = env(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .or_else(|| config(role_key))
                .or_else(|| config(user_key));
            found.unwrap_or_else(|| {
                used_fallback = true;
                fallback.to_string()
            })
        };
        let author_name = pick("GIT_AUTHOR_NAME", "author.name", "user.name", FALLBACK_NAME);
        let author_email = pick(
            "GIT_AUTHOR_EMAIL",
            "author.email",
            "user.email",
            FALLBACK_EMAIL,
        );
        let committer_name = pick(
            "GIT_COMMITTER_NAME",
            "committer.name",
            "user.name",
            FALLBACK_NAME,
        );
        let committer_email = pick(
            "GIT_COMMITTER_EMAIL",
            "committer.email",
            "user.email",
            FALLBACK_EMAIL,
        );
        Identity {
            author_name,
            author_email,
            committer_name,
            committer_email,
            used_fallback,
        }
    }
}
