#!/usr/bin/env python3
"""test_long_run_tools.py: CPU tests of the long-run comparison's tools (test/bench/long_run/, scripts/plot_loss.py),
as TAP for test/run_tests.sh. Standard library only (matplotlib is not needed: no picture is drawn).

The verdicts the issue-27 runs are judged by (compare.py), the learnable task's transformation (make_data.py), the
commands both sides run (run.py + settings.py) and the log reader (plot_loss.read) are checked on small hand-made
inputs whose answers are worked out here.
"""
import json
import math
import os
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "bench", "long_run"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import compare  # noqa: E402
import keep  # noqa: E402
import make_data  # noqa: E402
import plot_loss  # noqa: E402
import run  # noqa: E402
import settings as S  # noqa: E402

TESTS = []


def test(f):
    TESTS.append(f)
    return f


@test
def task_transformations():
    codes = make_data.code_table(["the cat and the dog", "The end and"], 2)
    # counts (lower-cased): the 3, and 2, cat/dog/end 1 -> "the" w0, "and" w1
    assert codes == {"the": "w0", "and": "w1"}, codes
    s = "The cat and a dog"
    assert make_data.transform(s, codes, "codes") == "w0 cat w1 a dog"
    assert make_data.transform(s, codes, "reverse_codes") == "dog a w1 cat w0"
    assert make_data.transform(s, codes, "swap_codes") == "cat w0 a w1 dog"
    # ties broken alphabetically
    assert make_data.code_table(["b a"], 1) == {"a": "w0"}
    # "short_" tasks: pieces of at most SHORT words, the last the remainder; each transformed on its own
    long = " ".join(f"x{i}" for i in range(2 * make_data.SHORT + 3))
    pieces = make_data.sources(long, "short_reverse_codes")
    assert [len(p.split()) for p in pieces] == [make_data.SHORT, make_data.SHORT, 3], pieces
    assert " ".join(pieces) == long and make_data.sources(long, "codes") == [long]
    assert make_data.transform("the x1 and", codes, "short_reverse_codes") == "w1 x1 w0"


@test
def verdict_rule():
    # both sides sd 0.1 over 3 seeds: pooled SE = sqrt(2 * 0.01 / 3) = 0.0816, bound = max(0.163, 0.01 * 5) = 0.163
    t = [5.0, 5.1, 5.2]
    v = compare.verdict([x + 0.16 for x in t], t)
    assert abs(v["pooled_se"] - math.sqrt(0.02 / 3)) < 1e-9 and v["ok"], v
    assert not compare.verdict([x + 0.17 for x in t], t)["ok"]
    # identical seeds on each side (sd 0): the 1% of HF's mean bounds the difference
    assert compare.verdict([5.04] * 3, [5.0] * 3)["ok"]
    assert not compare.verdict([5.06] * 3, [5.0] * 3)["ok"]
    # a NaN on either side never passes
    assert not compare.verdict([math.nan, 5.0, 5.0], [5.0] * 3)["ok"]


@test
def hf_loss_factor():
    assert compare.hf_loss_factor({"model_accepts_loss_kwargs": True, "gradient_accumulation_steps": 4,
                                   "world_size": 2}) == 8
    assert compare.hf_loss_factor({"model_accepts_loss_kwargs": False, "gradient_accumulation_steps": 4}) == 1
    assert compare.hf_loss_factor({}) == 1


def write_run(folder, evals, train, summary):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "trainer_log.jsonl"), "w") as f:
        for st, l in train.items():
            f.write(json.dumps({"step": st, "loss": l, "learning_rate": 1e-4, "grad_norm": 1.0, "max_steps": 100}) + "\n")
        for st, l in evals.items():
            f.write(json.dumps({"step": st, "eval_loss": l}) + "\n")
        f.write(json.dumps({"step": max(evals), "eval_loss": evals[max(evals)]}) + "\n")  # do_eval's repeat
    with open(os.path.join(folder, "run_summary.json"), "w") as f:
        json.dump(summary, f)


@test
def compare_folders():
    with tempfile.TemporaryDirectory() as d:
        for seed, e in ((1, 0.0), (2, 0.05), (3, -0.05)):
            write_run(f"{d}/fp32/hf_s{seed}", {50: 6.0 + e, 100: 5.0 + e}, {50: 5.5 + e, 100: 4.5 + e},
                      {"model_accepts_loss_kwargs": True, "gradient_accumulation_steps": 1, "train_loss": 5.0 + e})
            write_run(f"{d}/fp32/t5train_s{seed}", {50: 6.01 + e, 100: 5.01 + e}, {50: 5.5 + e, 100: 4.5 + e},
                      {"train_loss": 5.0 + e, "wall_s_driver": 10, "samples_per_s_end_to_end_driver": 1,
                       "alone_on_gpu": True})
            # accumulation 4 on the HF side as transformers 5.17 logs it: 4x the mean (hf_loss_factor)
            write_run(f"{d}/ga4_bf16/hf_s{seed}", {50: 6.0 + e}, {50: 4 * (5.5 + e)},
                      {"model_accepts_loss_kwargs": True, "gradient_accumulation_steps": 4, "train_loss": 4 * 5.5})
            write_run(f"{d}/ga4_bf16/t5train_s{seed}", {50: 6.0 + e}, {50: 5.5 + e}, {"train_loss": 5.5})
            # t5train 0.3 higher everywhere: fails (bound: 2 x 0.0408 or 1% = 0.06)
            write_run(f"{d}/bf16/hf_s{seed}", {50: 6.0 + e}, {50: 5.5 + e}, {})
            write_run(f"{d}/bf16/t5train_s{seed}", {50: 6.3 + e}, {50: 5.5 + e}, {})
        write_run(f"{d}/exact_stage0/t5train_s1", {50: 6.0, 100: 5.0}, {50: 5.5, 100: 4.5}, {})
        write_run(f"{d}/exact_zero3_offload/t5train_s1", {50: 6.0, 100: 5.0}, {50: 5.5, 100: 4.5}, {})
        write_run(f"{d}/exact_2gpu_stage2/t5train_s1", {50: 6.0, 100: 5.0 * (1 + 2e-6)}, {50: 5.5, 100: 4.5}, {})
        # 2 GPUs x 16 is judged against one GPU's 16 x accumulation 2 (exact_stage0_ga2), not the batch of 32
        write_run(f"{d}/exact_stage0_ga2/t5train_s1", {50: 6.0, 100: 5.0}, {50: 5.5, 100: 4.5}, {})
        res = {}
        for name in ("fp32", "ga4_bf16", "bf16"):
            res[name] = compare.compare_sides(name, compare.load_setting(f"{d}/{name}"))
        assert res["fp32"]["ok"] and len(res["fp32"]["eval"]) == 2, res["fp32"]
        assert abs(res["fp32"]["eval"][0]["diff"] - 0.01) < 1e-9
        assert res["ga4_bf16"]["ok"] and abs(res["ga4_bf16"]["final_train_loss_window"]["hf_mean"] - 5.5) < 1e-9
        assert not res["bf16"]["ok"]
        ex = {e["setting"]: e for e in compare.compare_exact(
            {n: compare.load_setting(f"{d}/{n}") for n in ("exact_stage0", "exact_zero3_offload", "exact_2gpu_stage2",
                                                            "exact_stage0_ga2")})}
        assert ex["exact_zero3_offload"]["bit_identical"] and ex["exact_zero3_offload"]["ok"]
        assert not ex["exact_2gpu_stage2"]["bit_identical"] and not ex["exact_2gpu_stage2"]["ok"]  # 2e-6 > 1e-6
        assert ex["exact_2gpu_stage2"]["against"] == "exact_stage0_ga2" and "exact_stage0_ga2" not in ex
        # a failed run (rc 1) is left out of the comparison and listed with its error line
        write_run(f"{d}/fp16/hf_s1", {50: 6.0}, {50: 5.5}, {"rc": 1, "last_logged_step": 50, "error": "Exception: min scale"})
        write_run(f"{d}/fp16/t5train_s1", {50: 6.0}, {50: 5.5}, {})
        fp16 = compare.load_setting(f"{d}/fp16")
        assert not fp16["hf"] and [{k: v for k, v in x.items() if k != "log"} for x in fp16["failed"]] == [{"setting": "fp16", "side": "hf", "seed": 1,
                                                      "last_logged_step": 50, "error": "Exception: min scale"}]
        md = compare.markdown(list(res.values()), list(ex.values()), fp16["failed"])
        assert "| fp32 | 3 / 3 | 2/2 |" in md and "FAIL" in md, md
        assert "| fp16 hf seed 1 | 50 | Exception: min scale |" in md, md


@test
def log_reader():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "trainer_log.jsonl")
        with open(p, "w") as f:
            f.write('{"step": 50, "loss": 5.0, "learning_rate": 1e-4, "grad_norm": 1.0, "max_steps": 100}\n')
            f.write('{"step": 100, "loss": 0.0, "learning_rate": 1e-4, "grad_norm": NaN, "max_steps": 100}\n')
            f.write('{"step": 100, "eval_loss": 4.0, "eval_bleu": 12.5}\n{"step": 100, "eval_loss": 4.5}\n')
            f.write('{"step": 60, "event": "overflow", "message": "OVERFLOW"}\n')
        r = plot_loss.read(p)
        assert r["train"][50] == 5.0 and math.isnan(r["train"][100]) and r["nonfinite"] == [100]
        assert r["eval"] == {100: 4.0} and r["bleu"] == {100: 12.5} and r["overflow"] == [60]
        steps, means, sds = plot_loss.mean_sd([{1: 1.0, 2: 2.0}, {1: 3.0}])
        assert steps == [1] and means == [2.0] and abs(sds[0] - math.sqrt(2)) < 1e-12


@test
def run_commands():
    class A:
        bin, data, init = "/bin/t5train", "/d", "/i"
    s = S.setting("zero3_offload_fp16")
    cmd, env = run.command("t5train", s, 2, A, "/w/zero3_offload_fp16/t5train_s2")
    i = cmd.index("--deepspeed")
    assert os.path.normpath(cmd[i + 1]) == "/w/ds_zero3_offload.json" and "--fp16" in cmd
    assert cmd[cmd.index("--model_name_or_path") + 1] == "/i/v10_s2" and cmd[cmd.index("--seed") + 1] == "2"
    cmd, env = run.command("hf", S.setting("ga4_bf16_hf_mean"), 1, A, "/w/ga4_bf16_hf_mean/hf_s1")
    assert cmd[cmd.index("--hf_model_accepts_loss_kwargs") + 1] == "false"
    assert cmd[cmd.index("--gradient_accumulation_steps") + 1] == "4" and "--bf16" in cmd
    cmd, env = run.command("hf", S.setting("fp16"), 1, A, "/w/fp16/hf_s1")
    assert env["WORLD_SIZE"] == "1" and env["MASTER_PORT"].isdigit()  # DeepSpeed without a launcher
    cmd, env = run.command("hf", S.setting("task_codes_bf16"), 3, A, "/w/t/hf_s3")
    assert cmd[cmd.index("--train_file") + 1] == "/d/task_codes_train.jsonl" and "--predict_with_generate" in cmd
    # every run against itself keeps exact_stage0's linear schedule: no DeepSpeed scheduler section
    for name in ("exact_zero3_offload", "exact_2gpu_stage2"):
        assert "scheduler" not in S.DS_CONFIGS[S.setting(name)["ds"]]
    # the optimizer reaches both sides only when it is not the default
    cmd, env = run.command("t5train", S.setting("sweep_codes_adafactor_0.001"), 1, A, "/w/s/t5train_s1")
    assert cmd[cmd.index("--optim") + 1] == "adafactor" and cmd[cmd.index("--learning_rate") + 1] == "0.001"
    assert "--optim" not in run.command("hf", S.setting("fp32"), 1, A, "/w/fp32/hf_s1")[0]
    # T5's recipe: t5train's own Adafactor flags on its side, the HF side builds transformers' Adafactor itself
    cmd = run.command("t5train", S.setting("task_codes_t5recipe"), 1, A, "/w/t/t5train_s1")[0]
    assert cmd[cmd.index("--adafactor_relative_step") + 1] == "true" and "--hf_adafactor_t5" not in cmd
    cmd = run.command("hf", S.setting("task_codes_t5recipe"), 1, A, "/w/t/hf_s1")[0]
    assert cmd[cmd.index("--hf_adafactor_t5") + 1] == "true" and "--adafactor_relative_step" not in cmd
    # relative updates under the linear schedule: scale_parameter on both sides, the rate and warm-up passed
    s = S.setting("task_codes_t5lin_0.01_d0")
    cmd = run.command("t5train", s, 1, A, "/w/t/t5train_s1")[0]
    assert cmd[cmd.index("--adafactor_scale_parameter") + 1] == "true" and "--adafactor_relative_step" not in cmd
    assert cmd[cmd.index("--learning_rate") + 1] == "0.01" and cmd[cmd.index("--dropout_rate") + 1] == "0.0"
    cmd = run.command("hf", s, 1, A, "/w/t/hf_s1")[0]
    assert cmd[cmd.index("--hf_adafactor_scale") + 1] == "true" and cmd[cmd.index("--warmup_steps") + 1] == "100"
    assert S.setting("task_codes_t5lin_0.01_4k")["max_steps"] == 4000
    h = S.setting("task_codes_t5lin_0.01_4k_hf")  # HF's side of it, generating every 1,000 steps
    assert h["sides"] == ("hf",) and h["eval_steps"] == 1000 and h["t5train_from"] == "task_codes_t5lin_0.01_4k"
    assert {k: v for k, v in h.items() if k not in ("eval_steps", "sides", "t5train_from", "name")} == \
        {k: v for k, v in S.setting("task_codes_t5lin_0.01_4k").items() if k not in ("eval_steps", "sides", "t5train_from", "name")}
    # the exact 2-GPU pair on a data size that fills every global batch of 32
    for name in ("exact_stage0_ga2_div", "exact_2gpu_stage2_div"):
        cmd = run.command("t5train", S.setting(name), 1, A, f"/w/{name}/t5train_s1")[0]
        assert cmd[cmd.index("--max_train_samples") + 1] == "22016" and 22016 % 32 == 0
    assert S.setting("exact_2gpu_stage2_div")["against"] == "exact_stage0_ga2_div"
    assert "--max_train_samples" not in run.command("t5train", S.setting("fp32"), 1, A, "/w/fp32/t5train_s1")[0]
    # fp16 beside DeepSpeed runs at a ZeRO stage whose engine scales the loss (DeepSpeed PR #8393)
    assert S.DS_CONFIGS[S.setting("fp16")["ds"]]["zero_optimization"]["stage"] >= 1


@test
def gpu_pool():
    """run.py --gpus: each run takes the least-loaded GPUs (lowest index on ties), counted in a file both run.py
    processes share; giving them back reports the other runs that were on them."""
    with tempfile.TemporaryDirectory() as d:
        class A:
            gpus, gpu_load = 4, f"{d}/load.json"
        got = [run.take_gpus(A, 1) for _ in range(5)]
        assert [g for g, _ in got] == [[0], [1], [2], [3], [0]] and [b for _, b in got] == [0, 0, 0, 0, 1], got
        assert run.take_gpus(A, 2) == ([1, 2], 1)  # a 2-GPU run: the two least loaded
        assert run.give_gpus(A, [0]) == 1 and run.give_gpus(A, [1, 2]) == 1
        with open(A.gpu_load) as f:
            assert json.load(f) == [1, 1, 1, 1]
        assert run.give_gpus(A, [3]) == 0


@test
def keep_reduces():
    with tempfile.TemporaryDirectory() as d:
        run_dir = f"{d}/runs/fp16/hf_s2"
        os.makedirs(run_dir)
        with open(f"{run_dir}/trainer_log.jsonl", "w") as f:
            f.write('{"step": 50, "loss": 5.0, "step_ms": 3.0, "rss_gib": 1.0, "max_steps": 100}\n')
            f.write('{"step": 60, "event": "overflow", "message": "OVERFLOW"}\n{"step": 70, "event": "eval_start"}\n')
            f.write('{"step": 100, "eval_loss": 4.0, "eval_bleu": 1.5, "gpu_mem_peak_gib": 2.0}\n')
        with open(f"{run_dir}/run_summary.json", "w") as f:
            json.dump({"rc": 1, "max_steps": 100}, f)
        with open(f"{run_dir}/log_tail.txt", "w") as f:
            f.write("step 60\n  File x\nException: Current loss scale already at minimum\n")
        sys.argv = ["keep.py", "--runs", f"{d}/runs", "--dst", f"{d}/kept", "--call", "7", "--shared", "alone",
                    "--rename", "fp16=fp16_x"]
        keep.main()
        with open(f"{d}/kept/fp16_x/hf_s2/trainer_log.jsonl") as f:
            lines = [json.loads(x) for x in f]
        assert lines == [{"step": 50, "loss": 5.0, "max_steps": 100}, {"step": 60, "event": "overflow"},
                         {"step": 100, "eval_loss": 4.0, "eval_bleu": 1.5}], lines
        with open(f"{d}/kept/fp16_x/hf_s2/run_summary.json") as f:
            sm = json.load(f)
        assert sm["device_call"] == 7 and sm["last_logged_step"] == 100 and sm["completed"]
        assert sm["error"] == "Exception: Current loss scale already at minimum" and not sm["alone_on_gpu"], sm


def main():
    print(f"1..{len(TESTS)}")
    bad = 0
    for i, t in enumerate(TESTS, 1):
        try:
            t()
            print(f"ok {i} - {t.__name__}")
        except Exception:
            bad += 1
            print(f"not ok {i} - {t.__name__}")
            print("# " + traceback.format_exc().replace("\n", "\n# "))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
