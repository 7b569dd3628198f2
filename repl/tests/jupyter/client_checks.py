"""The brain Jupyter kernel driven by the reference clients, jupyter_client and nbclient.

    python client_checks.py CHECK [ARGS]

JUPYTER_PATH must name the folder that holds the `brain` kernelspec (repl/tests/kernel.rs
installs one into a temporary prefix). Each check raises (exit 1) with what went wrong, and
prints what it measured.
"""
import os
import signal
import sys
import threading
import time

from jupyter_client.manager import start_new_kernel


def start():
    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="brain", startup_timeout=60)
    return km, kc, time.perf_counter() - t0


def execute(kc, code, timeout=60, **kw):
    """Runs code; returns the reply content and the iopub messages of the request."""
    msgs = []
    reply = kc.execute_interactive(code, output_hook=msgs.append, timeout=timeout, **kw)
    return reply["content"], msgs


def of_type(msgs, t):
    return [m["content"] for m in msgs if m["msg_type"] == t]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def kernel_info():
    km, kc, took = start()
    try:
        kc.kernel_info()
        info = kc.get_shell_msg(timeout=10)["content"]
        check(info["protocol_version"] == "5.3", info)
        check(info["language_info"]["name"] == "rhai", info)
        check(info["language_info"]["file_extension"] == ".rhai", info)
        print(f"kernel ready (start_new_kernel) in {took:.3f} s")
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def notebook(path, out):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    workdir = os.path.dirname(os.path.abspath(out))
    client = NotebookClient(nb, timeout=120, kernel_name="brain", resources={"metadata": {"path": workdir}})
    client.execute()
    nbformat.write(nb, out)
    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    kinds = [o.output_type for c in code for o in c.outputs]
    check("error" not in kinds, kinds)
    check(all(c.execution_count == i + 1 for i, c in enumerate(code)), [c.execution_count for c in code])
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    check(len(images) == 2, f"{len(images)} images, expected the loss and confusion plots")
    check(any(o.output_type == "stream" and "steps, last loss" in o.text for c in code for o in c.outputs), kinds)
    bars = [o for c in code for o in c.outputs if "progress" in o.get("data", {}).get("text/html", "")]
    check(len(bars) == 1 and "30/30" in bars[0].data["text/plain"], bars)
    html = [o for c in code for o in c.outputs if "<table>" in o.get("data", {}).get("text/html", "")]
    check(any("accuracy" in o.data["text/html"] for o in html), "the metrics map is a table")
    print(f"{len(code)} code cells, outputs {kinds}")


def interrupt(how):
    km, kc, _ = start()
    try:
        execute(kc, "let kept = 41;")
        kc.execute("let n = 0; for i in 0..1000000000 { n += 1; }")
        # The cell is running once the kernel says busy for it.
        while True:
            m = kc.get_iopub_msg(timeout=10)
            if m["msg_type"] == "execute_input":
                break
        time.sleep(0.3)
        t0 = time.perf_counter()
        if how == "message":
            km.interrupt_kernel()  # the kernelspec's interrupt_mode is "message"
        else:
            km.signal_kernel(signal.SIGINT)
        while True:
            m = kc.get_iopub_msg(timeout=10)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        took = time.perf_counter() - t0
        reply = kc.get_shell_msg(timeout=10)["content"]
        check(reply["status"] == "error" and reply["ename"] == "Interrupted", reply)
        check(took <= 1.0, f"idle {took:.3f} s after the interrupt")
        content, msgs = execute(kc, "kept + 1")
        check(of_type(msgs, "execute_result")[0]["data"]["text/plain"] == "42", msgs)
        print(f"interrupt ({how}): idle after {took * 1000:.0f} ms; the scope survived")
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def complete_inspect():
    km, kc, _ = start()
    try:
        execute(kc, "let x = ones([2, 3]);")
        kc.complete("x.", 2)
        c = kc.get_shell_msg(timeout=10)["content"]
        check("reshape" in c["matches"] and "generate" not in c["matches"], c)
        check((c["cursor_start"], c["cursor_end"]) == (2, 2), c)
        kc.complete("nn::", 4)
        c = kc.get_shell_msg(timeout=10)["content"]
        check("nn::linear" in c["matches"] and c["cursor_start"] == 0, c)
        kc.inspect("optim::adamw(m.parameters())", 8)
        c = kc.get_shell_msg(timeout=10)["content"]
        check(c["found"] and c["data"]["text/plain"].startswith("optim::adamw"), c)
        kc.is_complete("fn f(x) {")
        c = kc.get_shell_msg(timeout=10)["content"]
        check(c["status"] == "incomplete", c)
        print(f"{len(kc_matches(kc))} completions for `nn::`")
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def kc_matches(kc):
    kc.complete("nn::", 4)
    return kc.get_shell_msg(timeout=10)["content"]["matches"]


def errors():
    km, kc, _ = start()
    try:
        execute(kc, "let a = 1;")
        content, msgs = execute(kc, "let b = a + 1;\nlet c = b * missing;")
        check(content["status"] == "error" and content["ename"] == "RuntimeError", content)
        tb = of_type(msgs, "error")[0]["traceback"]
        check(tb[0].startswith("In[2]:2:13: "), tb)
        check(tb[1].strip() == "let c = b * missing;" and tb[2] == " " * 16 + "^", tb)
        content, msgs = execute(kc, "let d = ;")
        check(content["ename"] == "ParseError", content)
        content, msgs = execute(kc, "a + b")
        check(of_type(msgs, "execute_result")[0]["data"]["text/plain"] == "3", "b kept: " + str(msgs))
        # "Run all": the cells queued behind a failing one are aborted, not run.
        ids = [kc.execute("let s = 0; for i in 0..1000000 { s += i; } throw \"stop\";"), kc.execute("let a = 100;"), kc.execute("a")]
        status = {}
        while len(status) < 3:
            m = kc.get_shell_msg(timeout=30)
            status[m["parent_header"]["msg_id"]] = m["content"]["status"]
        check([status[i] for i in ids] == ["error", "aborted", "aborted"], status)
        content, msgs = execute(kc, "a")
        check(of_type(msgs, "execute_result")[0]["data"]["text/plain"] == "1", "the aborted cell did not run")
        print("errors name their cell, line and column; the session goes on; queued cells are aborted")
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def stdin():
    km, kc, _ = start()
    try:
        kc.execute('let name = input("who? "); print(`hello ${name}`);', allow_stdin=True)
        req = kc.get_stdin_msg(timeout=10)
        check(req["msg_type"] == "input_request" and req["content"]["prompt"] == "who? ", req)
        kc.input("ada")
        texts = []
        while True:
            m = kc.get_iopub_msg(timeout=10)
            if m["msg_type"] == "stream":
                texts.append(m["content"]["text"])
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        check("".join(texts) == "hello ada\n", texts)
        content, _ = execute(kc, 'input("x")', allow_stdin=False)
        check(content["status"] == "error" and "allow_stdin" in content["evalue"], content)
        print("input() went through the stdin channel")
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def progress():
    km, kc, _ = start()
    try:
        _, msgs = execute(kc, 'let s = 0; for i in progress(0..400000, "count") { s += i; } print(s);')
        shown = of_type(msgs, "display_data")
        updates = of_type(msgs, "update_display_data")
        check(len(shown) == 1 and updates, [m["msg_type"] for m in msgs])
        ids = {m["transient"]["display_id"] for m in shown + updates}
        check(len(ids) == 1, ids)
        check("400000/400000" in updates[-1]["data"]["text/plain"], updates[-1])
        check(of_type(msgs, "stream")[-1]["text"] == "79999800000\n", msgs)
        print(f"one bar, {len(updates)} updates in place")
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def dead_kernel():
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("let n = 0; for i in 0..1000000000 { n += 1; }")]
    client = NotebookClient(nb, timeout=120, kernel_name="brain")

    def kill_later():
        while client.km is None or not client.km.has_kernel:
            time.sleep(0.05)
        time.sleep(1.5)
        os.kill(client.km.provisioner.process.pid, signal.SIGKILL)

    threading.Thread(target=kill_later, daemon=True).start()
    t0 = time.perf_counter()
    try:
        client.execute()
    except DeadKernelError as e:
        took = time.perf_counter() - t0
        check(took < 30, f"reported after {took:.1f} s")
        print(f"the killed kernel was reported as dead after {took:.1f} s: {e}")
        return
    raise AssertionError("the notebook finished although its kernel was killed")


def restart():
    km, kc, _ = start()
    try:
        execute(kc, "let before = 1;")
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=30)
        content, _ = execute(kc, "before")
        check(content["status"] == "error", "a restarted kernel starts empty: " + str(content))
        content, msgs = execute(kc, "1 + 1")
        check(of_type(msgs, "execute_result")[0]["data"]["text/plain"] == "2", msgs)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    check(not km.is_alive(), "the kernel ended on shutdown")
    print("restart gave a fresh session; shutdown ended the process")


def alive(pid):
    """Whether a process runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def orphan():
    import subprocess

    starter = ("import time; from jupyter_client.manager import start_new_kernel; "
               "km, kc = start_new_kernel(kernel_name='brain', startup_timeout=60); "
               "print(km.provisioner.process.pid, flush=True); time.sleep(120)")
    helper = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    pid = int(helper.stdout.readline())
    helper.kill()
    helper.wait()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 10:
        if not alive(pid):
            print(f"the kernel exited {time.perf_counter() - t0:.1f} s after its frontend was killed")
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError("the kernel outlived its frontend by 10 s")


CHECKS = {
    "kernel_info": kernel_info,
    "notebook": notebook,
    "interrupt": interrupt,
    "complete_inspect": complete_inspect,
    "errors": errors,
    "stdin": stdin,
    "progress": progress,
    "dead_kernel": dead_kernel,
    "restart": restart,
    "orphan": orphan,
}

if __name__ == "__main__":
    CHECKS[sys.argv[1]](*sys.argv[2:])
