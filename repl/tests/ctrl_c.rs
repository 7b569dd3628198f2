//! Ctrl-C in a pseudo-terminal stops a running entry and keeps the session and its variables.

mod common;

#[test]
fn ctrl_c_stops_an_endless_loop_and_the_session_keeps_its_variables() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = common::brain(&dir);
    cmd.env("TERM", "dumb");
    let mut p = rexpect::session::spawn_command(cmd, Some(10_000)).expect("spawn brain in a pty");
    p.exp_string(">> ").unwrap();
    p.send_line("let kept = 41;").unwrap();
    p.exp_string(">> ").unwrap();
    p.send_line("loop { }").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let sent = std::time::Instant::now();
    p.send_control('c').unwrap();
    p.exp_string("interrupted").unwrap();
    let took = sent.elapsed();
    assert!(
        took < std::time::Duration::from_secs(3),
        "Ctrl-C took {took:?}"
    );
    p.exp_string(">> ").unwrap();
    p.send_line("print(kept + 1);").unwrap();
    p.exp_string("42").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}
