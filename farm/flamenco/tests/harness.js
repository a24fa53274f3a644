// Runs a Flamenco job compiler script the way Flamenco Manager does, against the job-type
// interface Flamenco documents (flamenco.blender.org, "Job Types" and "List of Commands"):
// the script defines JOB_TYPE and compileJob(job); it builds tasks with
// author.Task(name, type), task.addCommand(author.Command(name, parameters)) and
// task.addDependency(other), and adds them with job.addTask(task). The Manager fills the
// job's settings with the JOB_TYPE defaults first. The result is plain data: the tasks in
// the order added, each with its type, commands and the names of the tasks it depends on.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const SCRIPT = path.join(__dirname, "..", "neural_rom.js");

function load(script = SCRIPT) {
    const context = vm.createContext({
        author: {
            Task: (name, type) => {
                if (typeof name !== "string" || typeof type !== "string") {
                    throw new TypeError("author.Task(name, type) takes two strings");
                }
                const task = { name, type, commands: [], dependencies: [] };
                task.addCommand = (cmd) => task.commands.push(cmd);
                task.addDependency = (other) => task.dependencies.push(other);
                return task;
            },
            Command: (name, parameters) => ({ name, parameters }),
        },
        print: () => {},
    });
    vm.runInContext(fs.readFileSync(script, "utf8") + "\n;this.JOB_TYPE = JOB_TYPE;", context);
    return context;
}

function compile(settings, script = SCRIPT) {
    const ctx = load(script);
    const full = {};
    for (const s of ctx.JOB_TYPE.settings) {
        if (s.default !== undefined) full[s.key] = s.default;
    }
    Object.assign(full, settings);
    for (const s of ctx.JOB_TYPE.settings) {
        if (s.required && (full[s.key] === undefined || full[s.key] === "")) {
            throw new Error(`setting ${s.key} is required`);
        }
    }
    const tasks = [];
    const job = { settings: full, addTask: (t) => tasks.push(t) };
    ctx.compileJob(job);
    for (const t of tasks) {
        for (const d of t.dependencies) {
            if (!tasks.includes(d)) throw new Error(`${t.name} depends on a task not in the job`);
        }
    }
    // plain data of this realm (the script's arrays belong to the vm context's)
    return JSON.parse(JSON.stringify(tasks.map((t) => ({
        name: t.name,
        type: t.type,
        commands: t.commands.map((c) => ({ name: c.name, parameters: c.parameters })),
        dependencies: t.dependencies.map((d) => d.name),
    }))));
}

module.exports = { compile, load, SCRIPT };

// node harness.js '{"object": "Ball", ...}' prints the compiled tasks as JSON (for pytest).
if (require.main === module) {
    process.stdout.write(JSON.stringify(compile(JSON.parse(process.argv[2]))) + "\n");
}
