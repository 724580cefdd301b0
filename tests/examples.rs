//! The runnable scenarios keep telling the truth: each exits 0 only if it saw both the fenced
//! and the unfenced outcome.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `cargo test` builds the examples next to the test executables' directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--example", name]);
        if profile_dir.ends_with("release") {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success());
    }
    path
}

fn run(name: &str) -> String {
    run_with(name, &[])
}

fn run_with(name: &str, args: &[&str]) -> String {
    let out = Command::new(example(name)).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{name} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn zombie_producer_example_sees_both_outcomes() {
    let out = run("zombie_producer");
    assert!(out.contains("REJECTED") && out.contains("LANDED"), "{out}");
    assert!(
        out.contains("fenced: transactional id 'balance-writer' is at epoch 1, this producer holds epoch 0"),
        "{out}"
    );
}

#[test]
fn the_zombie_timeline_renders_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("zombie.html");
    let out = run_with("zombie_producer", &["--timeline", page.to_str().unwrap()]);
    assert!(out.contains(&format!("timeline written to {}", page.display())), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    for banned in ["<script", "<link", "<img", "url("] {
        assert!(!html.contains(banned), "the page loads nothing: {banned}");
    }
    let chromium = common::chromium();
    let url = format!("file://{}", page.display());
    let profile = dir.path().join("profile");
    let browser = |extra: &[&str]| {
        let out = Command::new(&chromium)
            .args(common::CHROMIUM_FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(&url)
            .output()
            .unwrap();
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The DOM the browser built: a lane per participant in both runs, the refusal with its epochs.
    let dom = browser(&["--dump-dom"]);
    assert_eq!(dom.matches("<g class=\"lane\"").count(), 8, "4 lanes in each of the 2 runs");
    for lane in ["producer A", "producer B", "broker 1 (accounts-0)", "coordinator"] {
        assert!(dom.contains(&format!("data-lane=\"{lane}\"")), "{lane}");
    }
    let refused = dom.split("<g class=\"mark refused\">").skip(1).collect::<Vec<_>>();
    assert_eq!(refused.len(), 2, "A's two late writes are refused, in the fenced run only");
    assert!(refused[0].contains("is at epoch 1, this producer holds epoch 0"), "{}", refused[0]);
    // What it drew: not blank, and the refusals' red crosses are on the screen. The fenced
    // run's picture alone (no legend, no list, whose red would count too).
    let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap() + "</svg>".len()];
    let picture = dir.path().join("fenced.html");
    std::fs::write(&picture, format!("<!DOCTYPE html><html><body style=\"margin:0\">{svg}</body></html>")).unwrap();
    let shot = dir.path().join("fenced.png");
    let out = Command::new(&chromium)
        .args(common::CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--window-size=1300,600", &format!("--screenshot={}", shot.display())])
        .arg(format!("file://{}", picture.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let rgb = pixels[..info.buffer_size()].chunks(channels).map(|p| (p[0], p[1], p[2]));
    let (mut inked, mut red, mut total) = (0usize, 0usize, 0usize);
    for (r, g, b) in rgb {
        total += 1;
        inked += usize::from(r < 200 || g < 200 || b < 200);
        red += usize::from(r > 180 && g < 90 && b < 90);
    }
    assert!(inked * 100 > total, "the screenshot is blank: {inked} of {total} pixels drawn");
    assert!(red > 200, "no refused mark on the screen: {red} red pixels");
}

#[test]
fn the_other_examples_and_the_simulator_draw_their_timelines() {
    let dir = tempfile::tempdir().unwrap();
    for (name, lanes, refused, why) in
        [("stale_leader", 10, 2, "with FENCED_LEADER_EPOCH"), ("exactly_once", 4, 2, "late commit REFUSED: fenced")]
    {
        let page = dir.path().join(format!("{name}.html"));
        let out = run_with(name, &["--timeline", page.to_str().unwrap()]);
        assert!(out.contains("timeline written to"), "{out}");
        let html = std::fs::read_to_string(&page).unwrap();
        assert_eq!(html.matches("<g class=\"lane\"").count(), lanes, "{name}");
        // stale_leader: the follower's refusal and the stale write's (and, without epoch checks,
        // whatever became of it there); exactly_once: the late invoice and the late commit.
        assert!(html.matches("<g class=\"mark refused\">").count() >= refused, "{name}");
        assert!(html.contains(why), "{name}: {why}");
    }
    let bad = Command::new(example("zombie_producer")).arg("--timelines").output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "an unknown argument is refused");
    // The simulator: one seed's run; a range of seeds is refused (one picture per run).
    let sim = |args: &[&str]| Command::new(sim_binary()).args(args).output().unwrap();
    let page = dir.path().join("sim.html");
    let out = sim(&["--seed", "32", "--timeline", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    for kind in ["crash", "pause", "election", "refused"] {
        assert!(html.contains(&format!("<g class=\"mark {kind}\">")), "seed 32 has a {kind} mark");
    }
    assert_eq!(sim(&["--seeds", "3", "--timeline", page.to_str().unwrap()]).status.code(), Some(2));
}

/// The `sim` binary, built with this test's profile.
fn sim_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "sim", "--bin", "sim"]);
    if profile_dir.ends_with("release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().unwrap().success());
    profile_dir.join("sim")
}

#[test]
fn stale_leader_example_sees_both_outcomes() {
    let out = run("stale_leader");
    assert!(out.contains("FENCED_LEADER_EPOCH") && out.contains("the replicas diverge"), "{out}");
}

#[test]
fn exactly_once_example_invoices_each_order_once() {
    let out = run("exactly_once");
    assert!(out.contains("its commit is REFUSED") && out.contains("each order invoiced exactly once: true"), "{out}");
}
