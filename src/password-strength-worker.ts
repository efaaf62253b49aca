import { parentPort, workerData } from 'node:worker_threads';
import { passwordProblems, type PasswordCheck } from './password-strength.js';

/** The thread of passwordProblemsElsewhere (src/password-strength.ts): judges its checks and answers once. */
parentPort!.postMessage(passwordProblems(workerData as PasswordCheck[]));
