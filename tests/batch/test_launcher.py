"""Which shard a process is, from the launcher's variables (vitviz.batch.launcher): torchrun, SLURM job arrays (ids
that do not start at 0, steps), srun tasks, a torchrun inside an array task; and the value a launcher never sets,
named. The commands themselves under these variables: tests/cli/test_merge_command.py (subprocesses) and the bad
values through the command line: tests/corpus/test_merge_corpus.py."""

from __future__ import annotations

import pytest

from vitviz.batch.launcher import Launch, LaunchError, launch_from_env


def test_no_launcher_no_shard():
    assert launch_from_env("cuda", {}) is None
    assert launch_from_env("cpu", {"PATH": "/bin", "RANK": "", "SLURM_JOB_ID": "7"}) is None  # empty = not set


def test_torchrun_rank_and_local_rank():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"}
    got = launch_from_env("cuda", env)
    assert got == Launch((4, 8), "cuda:3", "torchrun (RANK=3, WORLD_SIZE=8)")
    assert got.line() == "shard 4/8 from torchrun (RANK=3, WORLD_SIZE=8), device cuda:3"
    assert launch_from_env("cpu", env).device == "cpu"  # only the device 'cuda' follows LOCAL_RANK
    assert launch_from_env("cuda:1", env).device == "cuda:1"  # a device named exactly stays
    two_nodes = {"RANK": "11", "WORLD_SIZE": "16", "LOCAL_RANK": "3"}  # torchrun over 2 nodes: RANK is global
    assert launch_from_env("cuda", two_nodes).shard == (12, 16)
    assert launch_from_env("cuda", two_nodes).device == "cuda:3"


@pytest.mark.parametrize("env,shard", [
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, (1, 4)),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}, (4, 4)),  # no MIN: from 0
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "1"}, (1, 8)),  # --array=1-8
    ({"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "1"}, (8, 8)),
    ({"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
      "SLURM_ARRAY_TASK_STEP": "4"}, (4, 4)),  # --array=0-15:4
    ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "2", "SLURM_ARRAY_TASK_MAX": "9"}, (4, 8)),  # no COUNT
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "3"}, (3, 3)),  # srun
    ({"SLURM_PROCID": "0", "SLURM_NPROCS": "2"}, (1, 2)),  # an older SLURM's name
    # the array wins over the job's own task (an sbatch script's process is task 0 of 1)
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, (3, 3)),
    # torchrun wins over srun (torchrun over several nodes: its RANK is already global) ...
    ({"RANK": "5", "WORLD_SIZE": "8", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, (6, 8)),
    # ... and inside an array task it splits the task's share: array index x WORLD_SIZE + RANK
    ({"RANK": "1", "WORLD_SIZE": "2", "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3"}, (6, 6)),
])
def test_slurm_and_precedence(env, shard):
    got = launch_from_env("cpu", env)
    assert got.shard == shard and got.device == "cpu"


def test_every_shard_once():
    """The launchers' ranges give every shard exactly once: an array from 1, from 0 in steps, torchrun x array."""
    got = [launch_from_env("cpu", {"SLURM_ARRAY_TASK_ID": str(i), "SLURM_ARRAY_TASK_MIN": "1",
                                   "SLURM_ARRAY_TASK_COUNT": "5"}).shard for i in range(1, 6)]
    assert got == [(k, 5) for k in range(1, 6)]
    got = [launch_from_env("cpu", {"SLURM_ARRAY_TASK_ID": str(i), "SLURM_ARRAY_TASK_STEP": "3",
                                   "SLURM_ARRAY_TASK_COUNT": "4"}).shard for i in range(0, 12, 3)]
    assert got == [(k, 4) for k in range(1, 5)]
    got = sorted(launch_from_env("cpu", {"RANK": str(r), "WORLD_SIZE": "4", "SLURM_ARRAY_TASK_ID": str(a),
                                         "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"}).shard
                 for a in (1, 2, 3) for r in range(4))
    assert got == [(k, 12) for k in range(1, 13)]


def test_origin_names_the_variables():
    got = launch_from_env("cpu", {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1",
                                  "SLURM_ARRAY_TASK_COUNT": "8"})
    assert got.line() == ("shard 3/8 from SLURM array (SLURM_ARRAY_TASK_ID=3, SLURM_ARRAY_TASK_COUNT=8, "
                          "SLURM_ARRAY_TASK_MIN=1), device cpu")
    got = launch_from_env("cpu", {"SLURM_PROCID": "1", "SLURM_NTASKS": "4"})
    assert got.origin == "SLURM tasks (SLURM_PROCID=1, SLURM_NTASKS=4)"
    got = launch_from_env("cuda", {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "SLURM_ARRAY_TASK_ID": "0",
                                   "SLURM_ARRAY_TASK_COUNT": "2"})
    assert got.line() == ("shard 2/4 from SLURM array task 1 of 2 (SLURM_ARRAY_TASK_ID=0, SLURM_ARRAY_TASK_COUNT=2) "
                          "x torchrun (RANK=1, WORLD_SIZE=2), device cuda:1")


BAD = [  # (environment, device, what the message must say)
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "cpu", "RANK='abc': not an integer"),
    ({"RANK": "1", "WORLD_SIZE": "two"}, "cpu", "WORLD_SIZE='two': not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "cpu", "RANK=2: must be between 0 and WORLD_SIZE - 1 = 1"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "cpu", "RANK=-1: must be between 0 and WORLD_SIZE - 1 = 1"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "cpu", "WORLD_SIZE=0: must be at least 1"),
    ({"RANK": "1"}, "cpu", "WORLD_SIZE is not set"),
    ({"WORLD_SIZE": "4"}, "cpu", "RANK is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"}, "cuda", "LOCAL_RANK='x': not an integer"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "cuda", "LOCAL_RANK=-1: must be 0 or more"),
    ({"SLURM_ARRAY_TASK_ID": "1.5", "SLURM_ARRAY_TASK_COUNT": "4"}, "cpu", "SLURM_ARRAY_TASK_ID='1.5': not an integer"),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "n"}, "cpu", "SLURM_ARRAY_TASK_COUNT='n': not an integer"),
    ({"SLURM_ARRAY_TASK_ID": "1"}, "cpu", "SLURM_ARRAY_TASK_COUNT is not set"),
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4"}, "cpu",
     "SLURM_ARRAY_TASK_ID=4: not one of the 4 tasks of an array from SLURM_ARRAY_TASK_MIN=0"),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, "cpu",
     "SLURM_ARRAY_TASK_ID=0: not one of the 4 tasks"),
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, "cpu",
     "an array with gaps, such as --array=1,3,7"),
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_STEP": "0"}, "cpu",
     "SLURM_ARRAY_TASK_STEP=0: must be at least 1"),
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "0"}, "cpu",
     "SLURM_ARRAY_TASK_COUNT=0: must be at least 1"),
    ({"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, "cpu", "SLURM_PROCID=4: must be between 0 and SLURM_NTASKS - 1 = 3"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "x"}, "cpu", "SLURM_NTASKS='x': not an integer"),
    ({"SLURM_PROCID": "0"}, "cpu", "SLURM_NTASKS is not set"),
]


@pytest.mark.parametrize("env,device,needle", BAD, ids=[b[2][:40] for b in BAD])
def test_values_no_launcher_sets_are_named(env, device, needle):
    with pytest.raises(LaunchError) as e:
        launch_from_env(device, env)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg
    assert "--shard K/N" in msg  # how to go on
