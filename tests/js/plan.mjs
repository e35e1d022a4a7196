// Shared by the drivers: read the command line, run a plan of MCP calls, print one JSON line each.
//
//   node <driver>.mjs URL HEADERS_JSON PLAN_FILE
//
// HEADERS_JSON is an object of HTTP headers ("{}" for none). PLAN_FILE holds
// {"options": {...}, "steps": [{"op": "list"} | {"op": "call", "name": N, "arguments": {...}}]}
// (a file, not an argument: an oversized value is over the kernel's 128 KiB limit of one argument).
// Each step prints {"step": i, "op": ..., then "tools" (list), "result" (the call's result as the
// client surfaced it) or "error" (the message of the exception the client raised)}.
import { readFileSync } from "node:fs";

export function readArgs() {
  const [url, headersJson, planFile] = process.argv.slice(2);
  if (!url || headersJson === undefined || !planFile) {
    process.stderr.write("usage: node DRIVER.mjs URL HEADERS_JSON PLAN_FILE\n");
    process.exit(2);
  }
  const plan = JSON.parse(readFileSync(planFile, "utf8"));
  return { url: new URL(url), headers: JSON.parse(headersJson), plan };
}

export function emit(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

export function describe(error) {
  if (error instanceof Error) {
    const code = error.code === undefined ? "" : ` [code ${error.code}]`;
    return `${error.name}: ${error.message}${code}`;
  }
  return String(error);
}

/** Run every step with `listTools()` / `callTool(name, args)` of a connected client. */
export async function runSteps(client, steps) {
  for (const [step, spec] of steps.entries()) {
    try {
      if (spec.op === "list") {
        const { tools } = await client.listTools();
        emit({ step, op: "list", tools });
      } else if (spec.op === "call") {
        const result = await client.callTool({ name: spec.name, arguments: spec.arguments });
        emit({ step, op: "call", name: spec.name, result });
      } else {
        throw new Error(`unknown plan op ${JSON.stringify(spec.op)}`);
      }
    } catch (error) {
      emit({ step, op: spec.op, name: spec.name, error: describe(error) });
    }
  }
}
