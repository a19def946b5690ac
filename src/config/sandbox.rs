//! The sandbox's settings (SPEC §4), merged by a rule of their own: a repository layer can
//! turn the sandbox on and tighten it, never the reverse.

use std::path::PathBuf;

use super::Source;
use crate::error::{Error, Result};

/// The sandbox's settings. Deliberately not by precedence: a repository layer (which the agent
/// can write) can turn the sandbox on, hide more and take the network away, never the reverse;
/// `sandbox_writable` and `sandbox_env_keep` are taken from the user's own layers only.
pub(super) fn merge_sandbox(layers: &[Source]) -> Result<Option<crate::sandbox::Config>> {
    let config = sandbox_config(layers)?;
    let on = layers.iter().any(|s| s.layer.sandbox == Some(true))
        || config.net == crate::sandbox::Net::None;
    Ok(on.then_some(config))
}

/// The sandbox's configuration from every layer, whether it is on or not.
pub(super) fn sandbox_config(layers: &[Source]) -> Result<crate::sandbox::Config> {
    use crate::sandbox::{Config, Net, parse_path};
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let home = home.as_deref().filter(|h| !h.as_os_str().is_empty());
    let mut config = Config::default();
    for s in layers {
        if s.layer.sandbox_net == Some(Net::None) {
            config.net = Net::None;
        }
        for entry in s.layer.sandbox_hidden.iter().flatten() {
            config
                .hidden
                .push(parse_path(&s.name, "sandbox_hidden", entry, home)?);
        }
        for (key, set) in [
            ("sandbox_writable", s.layer.sandbox_writable.is_some()),
            ("sandbox_env_keep", s.layer.sandbox_env_keep.is_some()),
        ] {
            if set && s.from_repo {
                return Err(Error::user(format!(
                    "{}: `{key}` is not taken from the repository (the agent can write it)",
                    s.name
                ))
                .with_hint("set it in ~/.config/ralph/config.toml"));
            }
        }
        for entry in s.layer.sandbox_writable.iter().flatten() {
            config
                .writable
                .push(parse_path(&s.name, "sandbox_writable", entry, home)?);
        }
        for name in s.layer.sandbox_env_keep.iter().flatten() {
            config.env_keep.push(env_name(&s.name, name)?);
        }
    }
    Ok(config)
}

/// A `sandbox_env_keep` entry: a variable's name.
fn env_name(source: &str, name: &str) -> Result<String> {
    let ok = !name.is_empty() && !name.contains(['=', '\0']) && !name.contains(char::is_whitespace);
    if ok {
        Ok(name.to_string())
    } else {
        Err(Error::user(format!(
            "{source}: `sandbox_env_keep` entry `{name}` is not a variable's name"
        ))
        .with_hint("write names like `SSH_AUTH_SOCK`"))
    }
}
