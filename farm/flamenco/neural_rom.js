// SPDX-License-Identifier: GPL-3.0-or-later
//
// Neural ROM on Flamenco (Blender's own farm manager): a job type with the task graph of
// the OpenJD template next to it (../openjd/template.yaml):
//
//   tetrahedralize -> bake 1..N (one task per shard) -> merge -> train -> compare
//                                                                    \-> simulate
//
// Install: copy this file into the `scripts/` folder next to flamenco-manager and restart
// the Manager; submit from Blender's Flamenco add-on (job type "Neural ROM") or through
// the Manager's API. Every task runs Blender on the job's .blend with the extension's
// headless CLI (`{blender} {blenderArgs} file.blend --command neural_rom <command> ...`,
// README "Headless (farm) use"), so the workers need Blender 4.2+ with the extension
// installed and the .blend's folder on shared storage (its cache folder //neural_rom/ is
// written there). Only tetrahedralize, merge and train save the .blend; the shards,
// compare and simulate never write it, so tasks that run at once never race on it.
//
// A failed shard is re-queued alone (each is one `bake --shard i/N`, deterministic by its
// seed); re-running a task or the job resumes: a bake keeps its complete variants and
// resumes an unfinished one after its last committed frame, merge records whatever the
// shards left (and bakes a variant no shard finished), training resumes from checkpoints.

const JOB_TYPE = {
    label: "Neural ROM",
    description: "Tetrahedralize, bake in shards, train a reduced model, compare, simulate",
    settings: [
        { key: "object", type: "string", required: true,
          description: "The deformable object" },
        { key: "method", type: "string", default: "linear", required: true,
          description: "The reduced model to train (train --help lists them)" },
        { key: "train_options", type: "string", default: "",
          description: "More options of the train command, e.g. '--k 12 --tolerance 0.002'" },
        { key: "train_task_type", type: "string", default: "blender",
          description: "Task type of the train task: give the GPU workers a type of their own " +
                       "(e.g. 'blender-gpu' in their task_types) to train a torch method on them" },
        { key: "seed", type: "int32", default: 0, description: "The bakes' seed" },
        { key: "variants", type: "int32", default: 8, required: true,
          description: "Training scenarios to bake (variants of the object's scenario)" },
        { key: "variants_per_task", type: "int32", default: 2, required: true,
          description: "Variants one bake task bakes (the chunk size): ceil(variants / this) shards" },
        { key: "simulate_frames", type: "string", default: "1:120",
          description: "The frame range of the simulated cache, START:END" },
        // Set by the Flamenco add-on when submitting from Blender.
        { key: "blendfile", type: "string", required: true, visible: "web",
          description: "Path of the .blend file" },
    ],
};

function compileJob(job) {
    const s = job.settings;
    const variants = positiveInt(s.variants, "variants");
    const shards = Math.ceil(variants / positiveInt(s.variants_per_task, "variants_per_task"));
    const blend = s.blendfile;
    const dir = blend.replace(/[\\/][^\\/]*$/, "");
    const object = s.object;
    const seed = ["--seed", String(s.seed || 0), "--variants", String(variants)];
    const extra = (s.train_options || "").split(/\s+/).filter((a) => a.length > 0);

    const tets = blenderTask(job, "tetrahedralize", "blender", blend,
        ["tetrahedralize", "--object", object, "--save"], []);
    const bakes = [];
    for (let i = 0; i < shards; i++) {
        bakes.push(blenderTask(job, `bake-${i + 1}-of-${shards}`, "blender", blend,
            ["bake", "--object", object, ...seed, "--processes", "1", "--shard", `${i}/${shards}`],
            [tets]));
    }
    const merge = blenderTask(job, "merge", "blender", blend,
        ["bake", "--object", object, ...seed, "--save"], bakes);
    const train = blenderTask(job, "train", s.train_task_type || "blender", blend,
        ["train", "--object", object, "--method", s.method, ...extra, "--save"], [merge]);
    blenderTask(job, "compare", "blender", blend,
        ["compare", "--object", object, "--json", `${dir}/neural_rom/${object}_compare.json`],
        [train]);
    blenderTask(job, "simulate", "blender", blend,
        ["simulate", "--object", object, "--frames", s.simulate_frames || "1:120",
         "--out", `${dir}/neural_rom/${object}_reduced.pc2`],
        [train]);
}

// One task running `{blender} {blenderArgs} <blend> --command neural_rom <cli...>`.
function blenderTask(job, name, taskType, blend, cli, dependsOn) {
    const task = author.Task(name, taskType);
    task.addCommand(author.Command("blender-render", {
        exe: "{blender}",
        exeArgs: "{blenderArgs}",
        argsBefore: [],
        blendfile: blend,
        args: ["--command", "neural_rom", ...cli],
    }));
    for (const other of dependsOn) {
        task.addDependency(other);
    }
    job.addTask(task);
    return task;
}

function positiveInt(value, key) {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) {
        throw `Neural ROM: setting ${key} must be a whole number of at least 1, got ${value}`;
    }
    return n;
}
