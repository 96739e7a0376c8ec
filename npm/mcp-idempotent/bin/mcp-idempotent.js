#!/usr/bin/env node
// Runs the mcp-idempotent binary built for this platform, which npm
// installed as one of this package's optional dependencies (only the one
// whose "os" and "cpu" match). The binary gets this process's stdin,
// stdout and stderr as they are: no byte of the MCP traffic passes
// through Node.
"use strict";

const { spawn } = require("node:child_process");
const { writeSync } = require("node:fs");
const { constants } = require("node:os");

const packages = {
  "linux x64": "@mcp-idempotent/linux-x64",
  "linux arm64": "@mcp-idempotent/linux-arm64",
  "darwin x64": "@mcp-idempotent/darwin-x64",
  "darwin arm64": "@mcp-idempotent/darwin-arm64",
  "win32 x64": "@mcp-idempotent/win32-x64",
};

// fail writes msg to stderr at once: a write to process.stderr may be
// asynchronous where stderr is a pipe, as an MCP client's is, and
// process.exit would then drop it.
function fail(msg) {
  writeSync(2, `mcp-idempotent: ${msg}\n`);
  process.exit(1);
}

const pkg = packages[`${process.platform} ${process.arch}`];
if (!pkg) {
  fail(`no binary is built for ${process.platform} ${process.arch}; there is one for ${Object.keys(packages).join(", ")}`);
}
const exe = process.platform === "win32" ? "mcp-idempotent.exe" : "mcp-idempotent";
let bin;
try {
  bin = require.resolve(`${pkg}/bin/${exe}`);
} catch {
  fail(`${pkg}, the package that holds the binary for this platform, is not installed. ` +
    "npm installs it as an optional dependency: install mcp-idempotent again without --omit=optional or --no-optional.");
}

// A signal for this process is for the proxy: it stops its upstream and
// finishes what it can before it exits. On Windows the console sends its
// Ctrl-C or close to the proxy itself, and child.kill would not signal
// but terminate it, with calls under way unrecorded: there the launcher
// only waits for the proxy's exit, to pass on its status. The listeners
// come first: a signal before them would end Node and leave the proxy
// running, and one after runs them once child is set, as they run
// between events.
let child;
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    if (process.platform !== "win32") child.kill(sig);
  });
}
child = spawn(bin, process.argv.slice(2), { stdio: "inherit", windowsHide: true });
child.on("error", (err) => fail(`running ${bin}: ${err.message}`));
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal, so that the caller sees what the proxy saw.
    // Node ignores SIGPIPE, and SIGUSR1 starts its inspector: for those,
    // or any other this process outlives, exit 128 plus the signal's
    // number, as a shell reports a death by signal.
    if (signal !== "SIGPIPE" && signal !== "SIGUSR1") {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    }
    process.exit(128 + (constants.signals[signal] ?? 0));
  }
  process.exit(code ?? 1);
});
