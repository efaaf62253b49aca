/**
 * SIGTERM and SIGINT from the process's first moment: imported first by the entry (main.ts), so
 * that a signal while the configuration and the service's modules load is not Node's default
 * (death by the signal) but an exit 0, as nothing is running yet to drain. Once the service
 * exists the entry hands over what a signal does (onStopSignal).
 */
let handler: (signal: NodeJS.Signals) => void = () => process.exit(0);
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => handler(signal));

export function onStopSignal(fn: (signal: NodeJS.Signals) => void): void {
  handler = fn;
}
