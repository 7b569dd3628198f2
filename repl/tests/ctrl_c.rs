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
    interrupt_within_3_seconds(&mut p);
    p.exp_string(">> ").unwrap();
    p.send_line("print(kept + 1);").unwrap();
    p.exp_string("42").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

#[test]
fn ctrl_c_stops_a_yolo_epoch_saves_last_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = common::brain(&dir);
    cmd.env("TERM", "dumb").args(["--device", "cpu"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(60_000)).expect("spawn brain in a pty");
    p.exp_string(">> ").unwrap();
    // 256 images of 128 pixels in batches of 2: an epoch of YOLO11n takes a minute or more on
    // the CPU, so the Ctrl-C lands inside it.
    p.send_line(concat!(
        "let data = data::yolo_shapes(\"shapes\", #{ train: 256, val: 2, imgsz: 128 }); ",
        "let t = yolo::trainer(\"yolo11n.yaml\", #{ data: data, epochs: 5, batch: 2, imgsz: 128, workers: 1, save_dir: \"run\" });"
    ))
    .unwrap();
    p.exp_string(">> ").unwrap();
    p.send_line("t.epoch();").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2000));
    interrupt_within_3_seconds(&mut p);
    p.exp_string(">> ").unwrap();
    // `last` was saved, marked to train epoch 1 again; the trainer still answers.
    p.send_line("print(`resume at ${yolo::resume(\"run/last.safetensors\").next_epoch()}`);")
        .unwrap();
    p.exp_string("resume at 1").unwrap();
    p.send_line("print(`next ${t.next_epoch()}`);").unwrap();
    p.exp_string("next 1").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

/// Sends Ctrl-C and checks the session reports the interruption within 3 seconds.
fn interrupt_within_3_seconds(p: &mut rexpect::session::PtySession) {
    let sent = std::time::Instant::now();
    p.send_control('c').unwrap();
    p.exp_string("interrupted").unwrap();
    let took = sent.elapsed();
    assert!(
        took < std::time::Duration::from_secs(3),
        "Ctrl-C took {took:?}"
    );
}
