// mcp-remote, the stdio bridge desktop hosts run (`npx mcp-remote URL --header ...`): start it as
// a host would, speak newline-delimited JSON-RPC on its stdin/stdout, and print what the host
// reads back -- the JSON-RPC result of each call, or its JSON-RPC error. It must never start its
// OAuth flow: the caller passes the bearer header and points MCP_REMOTE_CONFIG_DIR at a tmp dir.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { emit, readArgs } from "./plan.mjs";

const { url, headers, plan } = readArgs();
const proxy = createRequire(import.meta.url).resolve("mcp-remote/dist/proxy.js");
const args = [proxy, url.href, "--transport", "http-only", ...(plan.options?.args ?? [])];
for (const [name, value] of Object.entries(headers)) args.push("--header", `${name}: ${value}`);
const child = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "pipe"] });
let stderr = "";
child.stderr.on("data", (chunk) => { stderr = (stderr + chunk).slice(-4000); });

const waiting = new Map();
createInterface({ input: child.stdout }).on("line", (line) => {
  let message;
  try { message = JSON.parse(line); } catch { return; }
  const resolve = waiting.get(message.id);
  if (resolve) { waiting.delete(message.id); resolve(message); }
});
const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));

let nextId = 1;
async function request(method, params) {
  const id = nextId++;
  const reply = new Promise((resolve) => waiting.set(id, resolve));
  child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
  const message = await Promise.race([reply, exited.then((code) => ({ exited: code }))]);
  if ("exited" in message) throw new Error(`mcp-remote exited (${message.exited}): ${stderr}`);
  if (message.error) throw new Error(`JSON-RPC error ${message.error.code}: ${message.error.message}`);
  return message.result;
}

try {
  const init = await request("initialize", {
    protocolVersion: "2025-06-18", capabilities: {},
    clientInfo: { name: "remember-sync-conformance", version: "1.0.0" },
  });
  child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
  emit({ op: "connect", protocolVersion: init.protocolVersion, server: init.serverInfo?.name });
  for (const [step, spec] of plan.steps.entries()) {
    try {
      if (spec.op === "list") {
        emit({ step, op: "list", tools: (await request("tools/list", {})).tools });
      } else {
        const result = await request("tools/call", { name: spec.name, arguments: spec.arguments });
        emit({ step, op: "call", name: spec.name, result });
      }
    } catch (error) {
      emit({ step, op: spec.op, name: spec.name, error: String(error.message ?? error) });
    }
  }
} catch (error) {
  emit({ op: "connect", error: String(error.message ?? error) });
} finally {
  child.stdin.end();
  child.kill("SIGTERM");
}
