"""One small adapter per Kafka client, so each scenario reads the same for both.

`make_client("confluent")` / `make_client("kafka-python")` import the client (a failed import
or a version other than the pinned one is a test failure, never a skip) and return an object
with:

- `idempotent_producer(bootstrap, **config)` and `transactional_producer(bootstrap, tid, **config)`:
  wrappers that record every delivery report (`acked`: (partition, offset, value); `failed`:
  (partition, value, error)); `.raw` is the client's own producer for client-specific checks.
- `read(bootstrap, topic, partitions, isolation)`: every record of the partitions from offset 0,
  read with `assign()` (no group management) until the consumer's position reaches the end
  offset the broker reports for that isolation level.
"""

import sys
import threading
import time
import uuid

from efcluster import HarnessError, wait_until

CLIENTS = ("confluent", "kafka-python")
CONFLUENT_VERSION = "2.16.1"
LIBRDKAFKA_VERSION = "2.16.0"
KAFKA_PYTHON_VERSION = "3.0.12"


def make_client(name):
    if name == "confluent":
        return ConfluentClient()
    if name == "kafka-python":
        return KafkaPythonClient()
    raise ValueError(f"unknown client {name!r}")


def kafka_python_subscribe(consumer, topics):
    """Subscribe a kafka-python group member to `topics`, its metadata for them known before it first joins.

    kafka-python 3.0.12 loses the result of a rebalance it starts because its metadata changed
    (the leader's `assignment_snapshot != metadata_snapshot`): when `poll(timeout_ms=N)` returns
    before that JoinGroup/SyncGroup finishes, the finished join is never applied, so the member
    keeps no partitions and stops heartbeating until its session expires (seen under load, with
    the first join made before the consumer had heard of the topic). Fetching the metadata right
    after subscribing makes the first join's assignment cover every partition, so no such
    rebalance is needed; rebalances the coordinator asks for are not affected."""
    consumer.subscribe(topics)
    known = consumer.topics()  # a metadata request: the group coordinator's snapshot now holds the topics
    missing = set(topics) - known
    if missing:
        raise HarnessError(f"kafka-python's metadata lacks the topics {sorted(missing)} it subscribed to")


class ReadResult:
    """Records read from each partition, in the order the consumer returned them."""

    def __init__(self):
        self.records = {}  # partition -> [(offset, value bytes)]
        self.ends = {}  # partition -> end offset the broker reported (HW, or LSO read_committed)

    def values(self, partition):
        return [v for _, v in self.records.get(partition, [])]

    def all_values(self):
        return [v for p in sorted(self.records) for v in self.values(p)]


class _Acks:
    """Delivery reports, with a condition to wait on (kafka-python calls back from its sender thread)."""

    def __init__(self):
        self.acked = []
        self.failed = []
        self._cond = threading.Condition()

    def ok(self, partition, offset, value):
        with self._cond:
            self.acked.append((partition, offset, value))
            self._cond.notify_all()

    def err(self, partition, value, error):
        with self._cond:
            self.failed.append((partition, value, error))
            self._cond.notify_all()

    def reported(self):
        return len(self.acked) + len(self.failed)


def _bounded(fn, timeout, what):
    """Run a blocking client call with a deadline: its result, or its exception re-raised here."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["error"] = e

    t = threading.Thread(target=run, name=what, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise HarnessError(f"{what} got no answer within {timeout} s (the broker or coordinator never replied?)")
    if "error" in out:
        raise out["error"]
    return out.get("value")


# --------------------------------------------------------------------------- confluent-kafka

class ConfluentClient:
    name = "confluent"

    def __init__(self):
        try:
            import confluent_kafka
        except ImportError as e:
            raise HarnessError(f"cannot import confluent_kafka ({e}): run scripts/kafka-clients-venv "
                               f"and use the python it prints") from e
        got = (confluent_kafka.__version__, confluent_kafka.libversion()[0])
        if got != (CONFLUENT_VERSION, LIBRDKAFKA_VERSION):
            raise HarnessError(f"confluent-kafka {got[0]} with librdkafka {got[1]} is installed; the suite is "
                               f"pinned to {CONFLUENT_VERSION} with {LIBRDKAFKA_VERSION}")
        self.ck = confluent_kafka
        self.producers = []

    def security(self, protocol, mechanism=None, user=None, password=None, ca=None, cert=None, key=None):
        """This client's settings for a listener of `protocol` (SASL_PLAINTEXT, SASL_SSL, SSL); `cert`
        and `key`: a client certificate for mutual TLS."""
        conf = {"security.protocol": protocol}
        if mechanism:
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
        if ca:
            conf["ssl.ca.location"] = ca
        if cert:
            conf.update({"ssl.certificate.location": cert, "ssl.key.location": key})
        return conf

    def idempotent_producer(self, bootstrap, **config):
        conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        conf.update(config)
        self.producers.append(ConfluentProducer(self.ck, conf))
        return self.producers[-1]

    def transactional_producer(self, bootstrap, tid, **config):
        conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
        conf.update(config)
        self.producers.append(ConfluentProducer(self.ck, conf))
        return self.producers[-1]

    def close_all(self):
        """Close every producer made (before the cluster goes, so none keeps reconnecting)."""
        for p in self.producers:
            p.close()

    def read(self, bootstrap, topic, partitions, isolation, timeout=30, **config):
        ck = self.ck
        conf = {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                "isolation.level": isolation, "enable.auto.commit": False,
                "enable.auto.offset.store": False, "auto.offset.reset": "error"}
        conf.update(config)
        c = ck.Consumer(conf)
        result = ReadResult()
        try:
            empty = set()
            for p in partitions:
                # retried: a broker just elected may not know yet that it leads (NOT_LEADER)
                lo, hi = wait_until(
                    lambda: _confluent_call(ck, c.get_watermark_offsets, ck.TopicPartition(topic, p), 5, False),
                    timeout, f"the end offsets of {topic}-{p} (ListOffsets)", interval=0.1)
                result.ends[p] = hi
                result.records[p] = []
                if hi <= lo:
                    empty.add(p)  # librdkafka has no position for a partition it got nothing from
            c.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
            deadline = time.monotonic() + timeout
            while True:
                pos = {tp.partition: tp.offset for tp in c.position([ck.TopicPartition(topic, p) for p in partitions])}
                if all(p in empty or pos[p] >= result.ends[p] for p in partitions):
                    break
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"confluent consumer ({isolation}) did not reach the end offsets {result.ends} of "
                        f"{topic} within {timeout} s: positions {pos}, read {[(p, len(r)) for p, r in result.records.items()]}")
                for m in _confluent_call(ck, c.consume, 10000, 0.2):
                    if m.error():
                        raise HarnessError(f"confluent consumer error on {topic}: {m.error()}")
                    result.records[m.partition()].append((m.offset(), m.value()))
        finally:
            c.close()
        return result


class ConfluentBindingError(Exception):
    """confluent-kafka failed with a SystemError that carries no KafkaException (the error is lost)."""


def _confluent_call(ck, fn, *args):
    """Call into confluent-kafka, turning what it raises into a catchable KafkaException.

    confluent-kafka 2.16.1 raises a fatal error from poll()/flush() as a bare KafkaError object,
    which is no BaseException subclass: `except Exception` misses it and pytest cannot report
    it. Only a bare `except:` catches it; it is re-raised here as KafkaException(error). When a
    delivery callback runs in the same poll after that error was set, the callback fails with a
    SystemError ("returned a result with an exception set") caused by the KafkaException: the
    KafkaException is re-raised then (that record's delivery report is lost with it). Sometimes
    the error is lost altogether ("returned NULL without setting an exception"):
    ConfluentBindingError. A record sent with report=False has no Python callback, which
    avoids both: then flush() raises the fatal error itself."""
    try:
        return fn(*args)
    except SystemError as e:
        cause = e.__cause__ or e.__context__
        while cause is not None and not isinstance(cause, ck.KafkaException):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise ConfluentBindingError(f"confluent-kafka lost the error it raised: {e}") from e
        raise cause from e
    except BaseException:
        raise
    except:  # noqa: E722 - the non-exception KafkaError described above
        raised = sys.exc_info()[1]
        if isinstance(raised, ck.KafkaError):
            raise ck.KafkaException(raised) from None
        raise HarnessError(f"confluent-kafka raised a non-exception object: {raised!r}") from None


class ConfluentProducer:
    def __init__(self, ck, conf):
        self.ck = ck
        self.conf = conf
        self.raw = ck.Producer(conf)
        self._acks = _Acks()
        self._sent = 0

    def _call(self, fn, *args):
        return _confluent_call(self.ck, fn, *args)

    @property
    def acked(self):
        return self._acks.acked

    @property
    def failed(self):
        return self._acks.failed

    def _report(self, err, msg):
        if err is None:
            self._acks.ok(msg.partition(), msg.offset(), msg.value())
        else:
            self._acks.err(msg.partition(), msg.value(), err)

    def send(self, topic, partition, value, report=True):
        """Queue one record. report=False: no Python delivery callback for it (see _confluent_call)."""
        kwargs = {"on_delivery": self._report} if report else {}
        while True:
            try:
                self._call(lambda: self.raw.produce(topic, value, partition=partition, **kwargs))
                break
            except BufferError:  # the local queue is full: serve delivery reports, then retry
                self._call(self.raw.poll, 0.05)
        self._sent += 1
        if self._sent % 500 == 0:  # serve delivery reports now and then, not per record
            self._call(self.raw.poll, 0)

    def flush(self, timeout=60):
        left = self._call(self.raw.flush, timeout)
        if left:
            raise HarnessError(f"confluent producer: {left} records still undelivered after flush({timeout})")

    def wait_reported(self, n, timeout=30):
        """Serve delivery reports until at least n records are acknowledged or failed."""
        deadline = time.monotonic() + timeout
        while self._acks.reported() < n:
            if time.monotonic() > deadline:
                raise HarnessError(f"only {self._acks.reported()} of {n} delivery reports within {timeout} s")
            self._call(self.raw.poll, 0.05)

    # transactions
    def init(self, timeout=30):
        self._call(self.raw.init_transactions, timeout)

    def begin(self):
        self._call(self.raw.begin_transaction)

    def commit(self, timeout=30):
        self._call(self.raw.commit_transaction, timeout)

    def abort(self, timeout=30):
        self._call(self.raw.abort_transaction, timeout)

    def close(self):
        """Drop what is unsent, then close (close() aborts an open transaction and flushes)."""
        raw, self.raw = self.raw, None
        if raw is None:
            return

        def shut():
            try:
                _confluent_call(self.ck, raw.purge)
            except self.ck.KafkaException:
                pass
            try:
                _confluent_call(self.ck, raw.close)
            except self.ck.KafkaException:
                pass

        try:
            _bounded(shut, 10, "confluent producer close")
        except HarnessError:
            pass  # a producer that cannot close in time is left to the process exit


# --------------------------------------------------------------------------- kafka-python

class KafkaPythonClient:
    name = "kafka-python"

    def __init__(self):
        try:
            import kafka
            import kafka.errors
        except ImportError as e:
            raise HarnessError(f"cannot import kafka (kafka-python) ({e}): run scripts/kafka-clients-venv "
                               f"and use the python it prints") from e
        if kafka.__version__ != KAFKA_PYTHON_VERSION:
            raise HarnessError(f"kafka-python {kafka.__version__} is installed; the suite is pinned to "
                               f"{KAFKA_PYTHON_VERSION}")
        self.kafka = kafka
        self.errors = kafka.errors
        self.producers = []

    def security(self, protocol, mechanism=None, user=None, password=None, ca=None, cert=None, key=None):
        """This client's settings for a listener of `protocol` (SASL_PLAINTEXT, SASL_SSL, SSL); `cert`
        and `key`: a client certificate for mutual TLS."""
        conf = dict(security_protocol=protocol)
        if mechanism:
            conf.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
        if ca:
            conf["ssl_cafile"] = ca
        if cert:
            conf.update(ssl_certfile=cert, ssl_keyfile=key)
        return conf

    def idempotent_producer(self, bootstrap, **config):
        conf = dict(bootstrap_servers=bootstrap.split(","), enable_idempotence=True, acks="all", linger_ms=5)
        conf.update(config)
        self.producers.append(KafkaPythonProducer(self.kafka, conf))
        return self.producers[-1]

    def transactional_producer(self, bootstrap, tid, **config):
        conf = dict(bootstrap_servers=bootstrap.split(","), transactional_id=tid, enable_idempotence=True,
                    acks="all", linger_ms=5)
        conf.update(config)
        self.producers.append(KafkaPythonProducer(self.kafka, conf))
        return self.producers[-1]

    def close_all(self):
        for p in self.producers:
            p.close()

    def read(self, bootstrap, topic, partitions, isolation, timeout=30, **config):
        kafka = self.kafka
        conf = dict(bootstrap_servers=bootstrap.split(","), isolation_level=isolation, group_id=None,
                    enable_auto_commit=False, auto_offset_reset="none")
        conf.update(config)
        c = kafka.KafkaConsumer(**conf)
        result = ReadResult()
        tps = [kafka.TopicPartition(topic, p) for p in partitions]
        try:
            c.assign(tps)
            ends = wait_until(lambda: c.end_offsets(tps), timeout, f"the end offsets of {topic} (ListOffsets)",
                              interval=0.1)
            for tp, end in ends.items():
                result.ends[tp.partition] = end
            for tp in tps:
                c.seek(tp, 0)
                result.records[tp.partition] = []
            deadline = time.monotonic() + timeout
            while True:
                pos = {tp.partition: c.position(tp) for tp in tps}
                if all(pos[p] >= result.ends[p] for p in partitions):
                    break
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"kafka-python consumer ({isolation}) did not reach the end offsets {result.ends} of "
                        f"{topic} within {timeout} s: positions {pos}, read {[(p, len(r)) for p, r in result.records.items()]}")
                for tp, recs in c.poll(timeout_ms=200, max_records=100000).items():
                    result.records[tp.partition].extend((r.offset, r.value) for r in recs)
        finally:
            c.close()
        return result


class KafkaPythonProducer:
    def __init__(self, kafka, conf):
        self.kafka = kafka
        self.conf = conf
        self.raw = kafka.KafkaProducer(**conf)
        self._acks = _Acks()
        self.futures = []

    @property
    def acked(self):
        return self._acks.acked

    @property
    def failed(self):
        return self._acks.failed

    def send(self, topic, partition, value):
        f = self.raw.send(topic, value=value, partition=partition)
        f.add_callback(lambda md: self._acks.ok(md.partition, md.offset, value))
        f.add_errback(lambda e: self._acks.err(partition, value, e))
        self.futures.append(f)
        return f

    def flush(self, timeout=60):
        self.raw.flush(timeout)

    def wait_reported(self, n, timeout=30):
        deadline = time.monotonic() + timeout
        with self._acks._cond:
            while self._acks.reported() < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HarnessError(f"only {self._acks.reported()} of {n} delivery reports within {timeout} s")
                self._acks._cond.wait(left)

    # transactions: kafka-python's commit and abort wait without a deadline, so bound them here
    def init(self, timeout=30):
        _bounded(self.raw.init_transactions, timeout, "kafka-python init_transactions")

    def begin(self):
        self.raw.begin_transaction()

    def commit(self, timeout=30):
        _bounded(self.raw.commit_transaction, timeout, "kafka-python commit_transaction")

    def abort(self, timeout=30):
        _bounded(self.raw.abort_transaction, timeout, "kafka-python abort_transaction")

    def close(self):
        raw, self.raw = self.raw, None
        if raw is not None:
            try:
                _bounded(lambda: raw.close(timeout=2), 10, "kafka-python producer close")
            except Exception:  # noqa: BLE001 - teardown of a producer that may be fenced or failed
                pass
