"""Fixtures for the real-client suite: the clients, and real epochfence clusters.

Run from the repository root (the binaries' directory is required):

    EPOCHFENCE_BIN=/path/to/bin <venv>/bin/python -m pytest tests/kafka_clients -q -p no:cacheprovider

Every test runs once per client (`client` is parametrized over confluent and kafka-python).
`start_cluster(...)` starts a coordinator and brokers as processes in the test's tmp dir; all of
them are SIGKILLed at teardown, pass or fail (and die with the test process if it is killed),
and when a test fails, the tail of every process's log is attached to its report.
"""

import pytest

import clients
import efcluster


def pytest_configure(config):
    try:
        efcluster.bin_dir()
    except efcluster.HarnessError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.fixture(params=clients.CLIENTS)
def client(request):
    """The client adapter (clients.py); a client that cannot be imported fails the test."""
    return clients.make_client(request.param)


@pytest.fixture
def start_cluster(request, tmp_path, client):
    """A factory: start_cluster(brokers=N, lease_ms=..., heartbeat_ms=..., no_fencing=..., fsync=...)."""
    made = []
    request.node._epochfence_clusters = made

    def start(**kwargs):
        c = efcluster.Cluster(str(tmp_path / f"cluster-{len(made)}"), **kwargs)
        made.append(c)
        return c

    yield start
    try:
        client.close_all()  # first, while the brokers still answer
    finally:
        for c in made:
            c.close()


# The group tests' coordinator: no initial rebalance delay, and sessions from 1 s.
GROUP_ARGS = ["--group-initial-rebalance-delay-ms", "0", "--group-min-session-timeout-ms", "1000"]


@pytest.fixture
def group_cluster(request, tmp_path):
    """A factory: group_cluster(coordinator_args) starts a coordinator (GROUP_ARGS, then
    `coordinator_args`) and one broker; for the group tests, which take no `client`."""
    made = []
    request.node._epochfence_clusters = made

    def start(coordinator_args=()):
        c = efcluster.Cluster(str(tmp_path / f"cluster-{len(made)}"), coordinator_args=GROUP_ARGS + list(coordinator_args))
        made.append(c)
        return c

    yield start
    for c in made:
        c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        # This suite must never skip (a client that cannot run is a failure, not a skip).
        report.outcome = "failed"
        report.longrepr = f"skipped ({report.longrepr}), but the real-client suite never skips"
    if report.failed:
        for c in getattr(item, "_epochfence_clusters", []):
            report.sections.append((f"epochfence logs ({report.when})", c.log_tails(40)))
