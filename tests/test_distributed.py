"""Multi-process settings: flags over environment, launcher detection, clear errors.

The runtime itself is exercised by tests/train/test_multihost.py (separate processes); here
nothing is started.
"""

import numpy as np
import pytest

from jaxgraph.distributed import (
    DistributedConfig,
    check_same_on_all_processes,
    detect_launcher,
    initialize,
)

ENV = {
    "JAXGRAPH_COORDINATOR": "10.0.0.1:1234",
    "JAXGRAPH_NUM_PROCESSES": "4",
    "JAXGRAPH_PROCESS_ID": "2",
    "JAXGRAPH_HEARTBEAT_TIMEOUT": "7",
}


def test_flags_override_environment():
    cfg = DistributedConfig.from_env(ENV, process_id=3, coordinator=None)
    assert cfg == DistributedConfig("10.0.0.1:1234", 4, 3, init_timeout=300, heartbeat_timeout=7)
    assert cfg.explicit
    assert not DistributedConfig.from_env({}).explicit


def test_bad_integer_names_its_source():
    with pytest.raises(ValueError, match="JAXGRAPH_NUM_PROCESSES must be an integer, got 'two'"):
        DistributedConfig.from_env({"JAXGRAPH_NUM_PROCESSES": "two"})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DistributedConfig(num_processes=2), r"--coordinator \(JAXGRAPH_COORDINATOR\), --process"),
        (DistributedConfig("h:1", 2, 2), r"process id 2 is not in \[0, 2\)"),
    ],
)
def test_incomplete_settings_are_refused(config, message):
    with pytest.raises(ValueError, match=message):
        initialize(config, {})


def test_single_process_starts_nothing():
    assert initialize(DistributedConfig(), {}) is False
    assert initialize(DistributedConfig(num_processes=1), {}) is False
    check_same_on_all_processes("anything", np.arange(3))  # no-op with one process


SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_NODELIST": "node[01-02]",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
}


@pytest.mark.parametrize(
    ("environ", "launcher"),
    [
        ({}, None),
        ({**SLURM, "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2"}, "SLURM"),
        ({**SLURM, "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1"}, None),  # one task
        ({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2"}, None),  # batch script, not an srun step
        ({"OMPI_COMM_WORLD_SIZE": "4"}, "Open MPI"),
        ({"OMPI_COMM_WORLD_SIZE": "1"}, None),
    ],
)
def test_detect_launcher(environ, launcher):
    assert detect_launcher(environ) == launcher
