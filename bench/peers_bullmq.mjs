// BullMQ's side of the peers scenario (bench/peers.py runs it; see its docstring).
//
//   node bench/peers_bullmq.mjs <mode> '<json config>'
//
// config: {modules, port, db, queue, ...}; `modules` is the directory BullMQ and ioredis
// were installed into (npm install --prefix). Every mode prints one JSON line on stdout.
//
// - bulk {count, batch}: Queue.addBulk of `count` jobs due in an hour, `batch` per call;
// - add {count}: Queue.add of `count` jobs due in 1-2 hours, one at a time;
//   both: {seconds, cpu_s (this process), redis_cpu_s (the server's)} of the timed part,
//   after a warm-up of the same calls (a batch; 100 adds);
// - schedule {count, lead_ms, span_ms, batch}: addBulk of `count` jobs `stamp` {due}, the
//   first due `lead_ms` after the writing starts, the others evenly over `span_ms` (0: all
//   at one instant); prints {first_due_ms, written_ms};
// - work {stamp_db, list}: one Worker with BullMQ's defaults (concurrency 1) whose processor
//   appends "due_ms started_ms" to `list` in `stamp_db` (as bench.tasks.stamp does); prints
//   {"ready": true} once connected, closes on SIGTERM.
import { createRequire } from "node:module";
import { join } from "node:path";

const [mode, raw] = process.argv.slice(2);
const config = JSON.parse(raw);
const require = createRequire(join(config.modules, "package.json"));
const { Queue, Worker } = require("bullmq");
const IORedis = require("ioredis");

const connection = { host: "127.0.0.1", port: config.port, db: config.db };
const HOUR = 3_600_000;

function now() {
  return performance.timeOrigin + performance.now();
}

async function redisCpu(client) {
  const info = await client.info("cpu");
  const field = (name) => Number(info.match(new RegExp(`${name}:([0-9.]+)`))[1]);
  return field("used_cpu_user") + field("used_cpu_sys");
}

async function timed(queue, write, warm) {
  const probe = new IORedis(connection);
  await warm(); // connect, load the scripts, let V8 compile the path
  const redisBefore = await redisCpu(probe);
  const cpuBefore = process.cpuUsage();
  const started = now();
  await write();
  const seconds = (now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const redisAfter = await redisCpu(probe);
  probe.disconnect();
  return {
    seconds,
    cpu_s: (cpu.user + cpu.system) / 1e6,
    redis_cpu_s: redisAfter - redisBefore,
  };
}

async function bulk(queue) {
  const write = async (first, count) => {
    for (let start = first; start < first + count; start += config.batch) {
      const jobs = [];
      for (let i = start; i < Math.min(first + count, start + config.batch); i++) {
        jobs.push({ name: "noop", data: { n: i }, opts: { delay: HOUR } });
      }
      await queue.addBulk(jobs);
    }
  };
  return timed(queue, () => write(0, config.count), () => write(-config.batch, config.batch));
}

async function addOneByOne(queue) {
  const write = async (first, count) => {
    for (let i = first; i < first + count; i++) {
      await queue.add("noop", { n: i }, { delay: HOUR + (i % 3600) * 1000 });
    }
  };
  return timed(queue, () => write(0, config.count), () => write(-100, 100));
}

async function schedule(queue) {
  await queue.waitUntilReady();
  const first = Math.floor(Date.now()) + config.lead_ms;
  const step = config.span_ms / config.count;
  for (let start = 0; start < config.count; start += config.batch) {
    const jobs = [];
    const at = Date.now();
    for (let i = start; i < Math.min(config.count, start + config.batch); i++) {
      const due = Math.floor(first + i * step);
      jobs.push({ name: "stamp", data: { due }, opts: { delay: due - at, timestamp: at } });
    }
    await queue.addBulk(jobs);
  }
  return { first_due_ms: first, written_ms: Date.now() };
}

async function work() {
  const stamps = new IORedis({ ...connection, db: config.stamp_db });
  const worker = new Worker(
    config.queue,
    async (job) => {
      const started = now();
      await stamps.rpush(config.list, `${job.data.due} ${started.toFixed(3)}`);
    },
    { connection },
  );
  worker.on("error", (error) => console.error(error));
  await worker.waitUntilReady();
  await stamps.ping();
  console.log(JSON.stringify({ ready: true }));
  process.on("SIGTERM", async () => {
    await worker.close();
    stamps.disconnect();
    process.exit(0);
  });
}

if (mode === "work") {
  await work();
} else {
  const queue = new Queue(config.queue, { connection });
  const run = { bulk, add: addOneByOne, schedule }[mode];
  if (!run) throw new Error(`unknown mode ${mode}`);
  const result = await run(queue);
  await queue.close();
  console.log(JSON.stringify(result));
}
