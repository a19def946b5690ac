//! The merge of layers, their parsing, the sandbox's rule and what a resume keeps.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::cli::RunOptions;

fn src(name: &str, layer: Layer) -> Source {
    Source {
        name: name.into(),
        layer,
        from_repo: false,
    }
}

#[test]
fn a_resume_keeps_the_runs_limits_unless_its_flags_give_one() {
    let file = Layer {
        max_cost: Some(1.0),
        timeout: Some("5s".into()),
        stuck_threshold: Some(2),
        completion_promise: Some("DONE".into()),
        ..Layer::default()
    };
    let pinned = merge(&[src("task", file)]).unwrap().pinned();
    // The agent edited the file: more money and time, no promise.
    let edited = Layer {
        max_cost: Some(1000.0),
        timeout: Some("10h".into()),
        stuck_threshold: Some(99),
        ..Layer::default()
    };
    let flags = Layer {
        check_timeout: Some("1m".into()),
        ..Layer::default()
    };
    let layers = [src("flags", flags), src("task", edited)];
    let mut s = merge(&layers).unwrap();
    s.keep_pinned(&pinned, &layers).unwrap();
    assert_eq!(s.max_cost, Some(1.0));
    assert_eq!(s.timeout, Some(Duration::from_secs(5)));
    assert_eq!(s.stuck_threshold, 2);
    assert_eq!(s.completion_promise.as_deref(), Some("DONE"));
    assert_eq!(s.check_timeout, Duration::from_secs(60));
    // `.ralph/config.toml` created by the agent: the user's hooks skipped, bigger files.
    let planted = Layer {
        no_verify: Some(true),
        max_file_size: Some("1GiB".into()),
        ..Layer::default()
    };
    let layers = [src("flags", Layer::default()), src("repo", planted)];
    let mut s = merge(&layers).unwrap();
    s.keep_pinned(&pinned, &layers).unwrap();
    assert!(!s.no_verify);
    assert_eq!(s.max_file_size, merge(&[]).unwrap().max_file_size);
    // A flag given now replaces the recorded value.
    let flags = Layer {
        max_cost: Some(3.0),
        ..Layer::default()
    };
    let mut s = merge(&[src("flags", flags.clone())]).unwrap();
    s.keep_pinned(&pinned, &[src("flags", flags)]).unwrap();
    assert_eq!(s.max_cost, Some(3.0));
}

#[test]
fn defaults_apply_without_layers() {
    let s = merge(&[]).unwrap();
    assert_eq!(s.agent, AgentChoice::Preset("copilot".into()));
    assert_eq!(s.max_iterations, 50);
    assert_eq!(s.stuck_threshold, 3);
    assert_eq!(s.grace, Duration::from_secs(10));
    assert_eq!(s.timeout, None);
    assert!(!s.no_commit);
    assert_eq!(s.check_timeout, Duration::from_secs(1800));
}

#[test]
fn hooks_come_from_config_files_with_their_provenance() {
    let text = "[hooks]\non_halt = \"notify-send done\"\nhook_timeout = \"5s\"\n";
    let project = Layer::parse_toml(Path::new("p.toml"), text).unwrap();
    let user = Layer::parse_toml(
        Path::new("u.toml"),
        "[hooks]\non_halt = \"mine\"\non_stuck = \"curl hook\"\n",
    )
    .unwrap();
    let layers = [
        Source {
            name: "p".into(),
            layer: project,
            from_repo: true,
        },
        src("u", user),
    ];
    let s = merge(&layers).unwrap();
    assert_eq!(s.hooks.on_halt.as_ref().unwrap().cmd, "notify-send done");
    assert!(s.hooks.on_halt.as_ref().unwrap().from_repo);
    assert!(!s.hooks.on_stuck.as_ref().unwrap().from_repo);
    let stuck = crate::event::Event::Stuck(crate::event::Stuck {
        iteration: 3,
        no_progress_iterations: 3,
    });
    assert_eq!(s.hooks.for_event(&stuck).unwrap().cmd, "curl hook");
    assert!(s.hooks.on_iteration.is_none());
    assert_eq!(s.hook_timeout, Duration::from_secs(5));
    let e = Layer::parse_toml(Path::new("p.toml"), "[hooks]\non_merge = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("p.toml:2") && e.contains("on_merge"), "{e}");
}

#[test]
fn a_repository_layer_turns_the_sandbox_on_and_tightens_it_never_the_reverse() {
    let repo = |text: &str| Source {
        name: ".ralph/config.toml".into(),
        layer: Layer::parse_toml(Path::new("c.toml"), text).unwrap(),
        from_repo: true,
    };
    let user = |text: &str| {
        src(
            "user.toml",
            Layer::parse_toml(Path::new("u"), text).unwrap(),
        )
    };
    assert_eq!(merge(&[]).unwrap().sandbox, None);
    let on = merge(&[repo("sandbox = true")]).unwrap().sandbox.unwrap();
    assert_eq!(on.net, crate::sandbox::Net::Host);
    let s = merge(&[repo("sandbox = false"), user("sandbox = true")]).unwrap();
    assert!(s.sandbox.is_some(), "a repository cannot turn it off");
    let s = merge(&[
        repo("sandbox_net = \"host\""),
        user("sandbox = true\nsandbox_net = \"none\""),
    ])
    .unwrap();
    assert_eq!(s.sandbox.unwrap().net, crate::sandbox::Net::None);
    let e = merge(&[repo("sandbox = true\nsandbox_writable = [\"/\"]")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(".ralph/config.toml") && e.contains("sandbox_writable"),
        "{e}"
    );
    let s = merge(&[user(
        "sandbox = true\nsandbox_writable = [\"/srv/cache\"]\nsandbox_hidden = [\"/srv/keys\"]",
    )])
    .unwrap();
    let c = s.sandbox.unwrap();
    assert_eq!(c.writable, vec![PathBuf::from("/srv/cache")]);
    assert_eq!(c.hidden, vec![PathBuf::from("/srv/keys")]);
    let e = merge(&[user("sandbox = true\nsandbox_hidden = [\"keys\"]")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("user.toml") && e.contains("`keys`"), "{e}");
    let e = Layer::parse_toml(Path::new("c.toml"), "sandbox_net = \"lan\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("c.toml:1"), "{e}");
}

#[test]
fn limit_backoff_is_at_least_a_second() {
    let zero = Layer {
        limit_backoff: Some("0s".into()),
        ..Layer::default()
    };
    let s = merge(&[src("flags", zero)]).unwrap();
    assert_eq!(s.limit_backoff, Duration::from_secs(1));
}

#[test]
fn higher_layers_win_field_by_field() {
    let flags = Layer {
        max_iterations: Some(7),
        ..Layer::default()
    };
    let front = Layer {
        max_iterations: Some(20),
        test_command: Some("make test".into()),
        agent: Some("claude".into()),
        ..Layer::default()
    };
    let project = Layer {
        test_command: Some("cargo test".into()),
        timeout: Some("30m".into()),
        agent_cmd: Some("x {prompt}".into()),
        ..Layer::default()
    };
    let s = merge(&[src("flags", flags), src("front", front), src("p", project)]).unwrap();
    assert_eq!(s.max_iterations, 7);
    assert_eq!(s.test_command.as_deref(), Some("make test"));
    assert_eq!(s.timeout, Some(Duration::from_secs(1800)));
    assert_eq!(s.agent, AgentChoice::Preset("claude".into()));
}

#[test]
fn agent_cmd_in_a_higher_layer_beats_a_lower_preset() {
    let flags = Layer {
        agent_cmd: Some("./a.sh".into()),
        ..Layer::default()
    };
    let front = Layer {
        agent: Some("claude".into()),
        ..Layer::default()
    };
    let s = merge(&[src("flags", flags), src("front", front)]).unwrap();
    assert_eq!(s.agent, AgentChoice::Template("./a.sh".into()));
}

#[test]
fn both_agent_keys_in_one_layer_is_an_error() {
    let l = Layer {
        agent: Some("claude".into()),
        agent_cmd: Some("x".into()),
        ..Layer::default()
    };
    let e = merge(&[src("cfg.toml", l)]).unwrap_err().to_string();
    assert!(e.contains("cfg.toml") && e.contains("agent_cmd"), "{e}");
}

#[test]
fn bad_duration_names_source_and_key() {
    let l = Layer {
        grace: Some("soon".into()),
        ..Layer::default()
    };
    let e = merge(&[src("cfg.toml", l)]).unwrap_err().to_string();
    assert!(e.contains("cfg.toml") && e.contains("`grace`"), "{e}");
}

#[test]
fn zero_grace_kills_at_once_and_zero_timeout_means_none() {
    let l = Layer {
        grace: Some("0s".into()),
        timeout: Some("0s".into()),
        ..Layer::default()
    };
    let s = merge(&[src("f", l)]).unwrap();
    assert_eq!(s.grace, Duration::ZERO);
    assert_eq!(s.timeout, None);
}

#[test]
fn toml_unknown_key_names_file_line_and_key() {
    let e = Layer::parse_toml(Path::new("c.toml"), "agent = \"claude\"\nbogus = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:2:"), "{e}");
    assert!(e.contains("bogus"), "{e}");
}

#[test]
fn toml_wrong_type_names_line() {
    let e = Layer::parse_toml(Path::new("c.toml"), "\nmax_iterations = \"many\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:2:"), "{e}");
}

#[test]
fn options_layer_keeps_flags() {
    let o = RunOptions {
        max_iterations: Some(4),
        grace: Some("2s".parse().unwrap()),
        no_commit: true,
        ..RunOptions::default()
    };
    let l = Layer::from_options(&o);
    assert_eq!(l.max_iterations, Some(4));
    assert_eq!(l.grace.as_deref(), Some("2s"));
    assert_eq!(l.no_commit, Some(true));
}

#[test]
fn commands_kept_from_state_json_count_as_the_repositorys() {
    // state.json is in the agent's reach: what a resume takes from it runs confined.
    let mut s = merge(&[]).unwrap();
    let pinned = crate::state::Pinned {
        agent_cmd: Some("my-agent {prompt}".into()),
        test_command: Some("make test".into()),
        verdict_command: Some("bin/verdict".into()),
        ..Default::default()
    };
    s.keep_pinned(&pinned, &[]).unwrap();
    assert_eq!(s.agent, AgentChoice::Template("my-agent {prompt}".into()));
    assert_eq!(s.test_command.as_deref(), Some("make test"));
    assert!(s.test_command_from_repo && s.verdict_command_from_repo);
    // A flag of the resume itself wins, and is the user's.
    let mut s = merge(&[]).unwrap();
    let now = Layer {
        test_command: Some("cargo test".into()),
        ..Layer::default()
    };
    s.test_command = Some("cargo test".into());
    s.keep_pinned(&pinned, &[src("flags", now)]).unwrap();
    assert_eq!(s.test_command.as_deref(), Some("cargo test"));
    assert!(!s.test_command_from_repo);
}

#[test]
fn a_resume_keeps_the_runs_sandbox_and_can_only_tighten_it() {
    use crate::sandbox::Net;
    let pinned = |net| crate::state::Pinned {
        sandbox: Some(crate::sandbox::Pinned { net }),
        ..Default::default()
    };
    let user = |text: &str| src("u", Layer::parse_toml(Path::new("u"), text).unwrap());
    // Recorded with the sandbox, resumed without a word of it: still sandboxed, with the
    // user's hidden paths and its network.
    let layers = [user("sandbox_hidden = [\"/srv/keys\"]")];
    let mut s = merge(&layers).unwrap();
    assert!(s.sandbox.is_none());
    s.keep_pinned(&pinned(Net::None), &layers).unwrap();
    let c = s.sandbox.clone().unwrap();
    assert_eq!(c.net, Net::None);
    assert_eq!(c.hidden, vec![PathBuf::from("/srv/keys")]);
    assert_eq!(
        s.pinned().sandbox,
        Some(crate::sandbox::Pinned { net: Net::None })
    );
    // Taking the network away on resume is allowed; giving it back is not.
    let flags = [src(
        "flags",
        Layer {
            sandbox_net: Some(Net::None),
            ..Layer::default()
        },
    )];
    let mut s = merge(&flags).unwrap();
    s.keep_pinned(&pinned(Net::Host), &flags).unwrap();
    assert_eq!(s.sandbox.unwrap().net, Net::None);
    // A run recorded without the sandbox resumes as today's settings say.
    let mut s = merge(&[]).unwrap();
    s.keep_pinned(&crate::state::Pinned::default(), &[])
        .unwrap();
    assert!(s.sandbox.is_none());
}

#[test]
fn sandbox_env_keep_is_the_users_and_holds_names() {
    let repo = Source {
        name: ".ralph/config.toml".into(),
        layer: Layer::parse_toml(Path::new("c"), "sandbox_env_keep = [\"SSH_AUTH_SOCK\"]").unwrap(),
        from_repo: true,
    };
    let e = merge(&[repo]).unwrap_err().to_string();
    assert!(
        e.contains(".ralph/config.toml") && e.contains("sandbox_env_keep"),
        "{e}"
    );
    let user = |t: &str| src("u.toml", Layer::parse_toml(Path::new("u"), t).unwrap());
    let s = merge(&[user(
        "sandbox = true\nsandbox_env_keep = [\"SSH_AUTH_SOCK\"]",
    )])
    .unwrap();
    assert_eq!(
        s.sandbox.unwrap().env_keep,
        vec!["SSH_AUTH_SOCK".to_string()]
    );
    let e = merge(&[user("sandbox = true\nsandbox_env_keep = [\"A=B\"]")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("u.toml") && e.contains("`A=B`"), "{e}");
}

#[test]
fn fallback_agents_come_from_the_highest_layer_and_a_resume_keeps_them() {
    let file = Layer::parse_toml(
        Path::new("cfg.toml"),
        "fallback_agents = [\"qwen\", \" droid \", \"qwen\", \"\"]\n",
    )
    .unwrap();
    let s = merge(&[src("cfg.toml", file.clone())]).unwrap();
    assert_eq!(
        s.fallback_agents,
        ["qwen", "droid"],
        "trimmed, repeats and blanks left out"
    );
    let flags = Layer {
        fallback_agents: Some(vec!["codex".into()]),
        ..Layer::default()
    };
    let s = merge(&[src("flags", flags), src("cfg.toml", file.clone())]).unwrap();
    assert_eq!(
        s.fallback_agents,
        ["codex"],
        "the flags' list replaces the file's"
    );
    let e = Layer::parse_toml(Path::new("cfg.toml"), "fallback_agents = \"qwen\"\n").unwrap_err();
    assert!(e.to_string().starts_with("cfg.toml:1: "), "{e}");
    // A resume keeps the run's chain unless its flags give one.
    let pinned = s.pinned();
    assert_eq!(pinned.fallback_agents, ["codex"]);
    let mut resumed = merge(&[src("cfg.toml", file)]).unwrap();
    resumed
        .keep_pinned(&pinned, &[src("flags", Layer::default())])
        .unwrap();
    assert_eq!(resumed.fallback_agents, ["codex"]);
    let now = Layer {
        fallback_agents: Some(vec!["gemini".into()]),
        ..Layer::default()
    };
    let mut resumed = merge(&[src("flags", now.clone())]).unwrap();
    resumed.keep_pinned(&pinned, &[src("flags", now)]).unwrap();
    assert_eq!(resumed.fallback_agents, ["gemini"]);
}
