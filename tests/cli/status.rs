//! `ralph status`: text and JSON after a run.

use crate::common::*;

#[test]
fn status_json_reports_iteration_counts_and_halt_reason() {
    let env = TestEnv::new();
    env.write_task(&["s1", "s2", "s3"], "");
    env.commit_all("initial");
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    assert_exit(&out, 3);
    let out = env.ralph(&["status", "--json"]);
    assert_exit(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["task"], "Test task");
    assert_eq!(v["mode"], "checklist");
    assert_eq!(v["running"], false);
    assert_eq!(v["pid"], serde_json::Value::Null);
    assert_eq!(v["iteration"], 2);
    assert_eq!(v["max_iterations"], 2);
    assert_eq!(v["done"], 2);
    assert_eq!(v["total"], 3);
    assert_eq!(v["halt_reason"], "max_iterations");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["remaining"], serde_json::json!(["s3"]));
    let recs = v["last_records"].as_array().unwrap();
    assert_eq!(recs.len(), 2);
    assert!(
        recs[1]
            .as_str()
            .unwrap()
            .starts_with("ITER 2 | 2/3 criteria")
    );
    assert!(v["run_id"].is_string());
    assert!(v.get("cost_usd").is_some());
}

#[test]
fn status_text_and_before_any_run() {
    let env = TestEnv::new();
    let out = env.ralph(&["status"]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("No run yet"));
    let out = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["halt_reason"], serde_json::Value::Null);
    assert_eq!(v["running"], false);

    env.write_task(&["s1"], "");
    env.commit_all("initial");
    assert_exit(&env.run_fake("idle", &[]), 4);
    let out = env.ralph(&["status"]);
    let so = stdout(&out);
    assert!(so.contains("halted — stalled, exit 4"), "{so}");
    assert!(so.contains("stalled") && so.contains("- [ ] s1"), "{so}");
}
