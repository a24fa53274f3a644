// node --test farm/flamenco/tests: the Neural ROM job type compiled as Flamenco does.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { compile, load } = require("./harness.js");

const BASE = { object: "Body", blendfile: "/proj/shot/shot.blend" };

function cliOf(task) {
    assert.equal(task.commands.length, 1);
    const cmd = task.commands[0];
    assert.equal(cmd.name, "blender-render");
    const p = cmd.parameters;
    assert.equal(p.exe, "{blender}");
    assert.equal(p.exeArgs, "{blenderArgs}");
    assert.deepEqual(p.argsBefore, []);
    assert.equal(p.blendfile, "/proj/shot/shot.blend");
    assert.deepEqual(p.args.slice(0, 2), ["--command", "neural_rom"]);
    return p.args.slice(2);
}

test("the job type's settings are typed as Flamenco's add-on reads them", () => {
    const { JOB_TYPE } = load();
    const keys = JOB_TYPE.settings.map((s) => s.key);
    assert.ok(keys.includes("blendfile") && keys.includes("variants_per_task"));
    for (const s of JOB_TYPE.settings) {
        assert.ok(["string", "int32", "float", "bool"].includes(s.type), s.key);
        assert.equal(typeof s.description, "string", s.key);
    }
});

test("the task graph: tetrahedralize, shards, merge, train, compare and simulate", () => {
    const tasks = compile({ ...BASE, variants: 5, variants_per_task: 2, seed: 3 });
    const names = tasks.map((t) => t.name);
    assert.deepEqual(names, [
        "tetrahedralize", "bake-1-of-3", "bake-2-of-3", "bake-3-of-3",
        "merge", "train", "compare", "simulate",
    ]);
    const by = Object.fromEntries(tasks.map((t) => [t.name, t]));
    assert.deepEqual(by["tetrahedralize"].dependencies, []);
    for (const i of [1, 2, 3]) {
        assert.deepEqual(by[`bake-${i}-of-3`].dependencies, ["tetrahedralize"]);
        assert.deepEqual(cliOf(by[`bake-${i}-of-3`]), [
            "bake", "--object", "Body", "--seed", "3", "--variants", "5",
            "--processes", "1", "--shard", `${i - 1}/3`,
        ]);
    }
    assert.deepEqual(by["merge"].dependencies, ["bake-1-of-3", "bake-2-of-3", "bake-3-of-3"]);
    assert.deepEqual(cliOf(by["merge"]),
        ["bake", "--object", "Body", "--seed", "3", "--variants", "5", "--save"]);
    assert.deepEqual(by["train"].dependencies, ["merge"]);
    assert.deepEqual(by["compare"].dependencies, ["train"]);
    assert.deepEqual(by["simulate"].dependencies, ["train"]);
    assert.deepEqual(cliOf(by["compare"]),
        ["compare", "--object", "Body", "--json", "/proj/shot/neural_rom/Body_compare.json"]);
    assert.deepEqual(cliOf(by["simulate"]), ["simulate", "--object", "Body", "--frames", "1:120",
        "--out", "/proj/shot/neural_rom/Body_reduced.pc2"]);
    // only the tasks that run alone save the .blend
    const saving = tasks.filter((t) => cliOf(t).includes("--save")).map((t) => t.name);
    assert.deepEqual(saving, ["tetrahedralize", "merge", "train"]);
});

test("chunking: every variant is in exactly one shard, whatever the chunk size", () => {
    for (const [variants, chunk] of [[1, 1], [8, 1], [8, 3], [7, 7], [7, 100]]) {
        const tasks = compile({ ...BASE, variants, variants_per_task: chunk });
        const shards = tasks.filter((t) => t.name.startsWith("bake-"));
        assert.equal(shards.length, Math.ceil(variants / chunk));
        const seen = [];
        for (const t of shards) {
            const [i, n] = cliOf(t).at(-1).split("/").map(Number);
            for (let k = 0; k < variants; k++) if (k % n === i) seen.push(k);
        }
        assert.deepEqual(seen.sort((a, b) => a - b), [...Array(variants).keys()]);
    }
});

test("train takes the method, its options and its own task type", () => {
    const tasks = compile({ ...BASE, method: "snp", train_options: " --k 12  --epochs 40 ",
                            train_task_type: "blender-gpu" });
    const train = tasks.find((t) => t.name === "train");
    assert.equal(train.type, "blender-gpu");
    assert.deepEqual(cliOf(train),
        ["train", "--object", "Body", "--method", "snp", "--k", "12", "--epochs", "40", "--save"]);
    assert.ok(tasks.filter((t) => t !== train).every((t) => t.type === "blender"));
});

test("bad counts are refused with the setting's name", () => {
    assert.throws(() => compile({ ...BASE, variants: 0 }), /setting variants must be a whole number/);
    assert.throws(() => compile({ ...BASE, variants_per_task: 1.5 }), /variants_per_task/);
    assert.throws(() => compile({ blendfile: "/x.blend" }), /setting object is required/);
});
