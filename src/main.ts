// the only static import: what a signal does while the rest loads (a bundle evaluates every
// static import before this module's body, so the others are imported in main())
import { onStopSignal } from './stop-signals.js';
import type { ConfigError as ConfigErrorType } from './config.js';
import type { PasswordCheck } from './password-strength.js';

const refuse = (err: ConfigErrorType): never => {
  // every problem at once, one line each (variables that share a reason share a line)
  for (const line of err.lines()) process.stderr.write(`configuration error: ${line}\n`);
  process.exit(2);
};

/** Process entry: config -> service -> listen; SIGTERM / SIGINT drain and exit 0 within 10 s. */
async function main() {
  const [{ loadConfig, ConfigError }, { passwordProblemsElsewhere }] = await Promise.all([import('./config.js'), import('./password-strength.js')]);
  let config;
  // the bootstrap passwords' strength is judged on another thread while the service's modules load
  const passwordChecks: PasswordCheck[] = [];
  try {
    config = loadConfig(process.env, { deferPasswordStrength: passwordChecks });
  } catch (err) {
    if (err instanceof ConfigError) refuse(err);
    throw err;
  }
  const weakPasswords = passwordProblemsElsewhere(passwordChecks);
  // the service's modules are loaded once the configuration holds: a refused one is said at once
  const { Service } = await import('./service.js');
  const weak = await weakPasswords;
  if (weak.length) refuse(new ConfigError(weak));
  const service = new Service(config);
  for (const warning of config.warnings) service.log.warn({ warning }, 'configuration warning');
  // once the accounts are seeded: only those still using the development password are named
  const warnDevelopment = async () => {
    // nothing to say to a stop that came first: the password pool and the database are closing
    if (config.env !== 'development' || service.state.stopping) return;
    const unset = [config.adminPasswordConfigured ? null : config.adminUser, config.botPasswordConfigured ? null : config.botUser].filter(Boolean);
    const { developmentPasswordsInUse } = await import('./iam/seed.js');
    const defaults = await developmentPasswordsInUse(service.iam.store, config, service.iam.passwords).catch(() => unset);
    service.log.warn(
      { default_passwords: defaults, generated_master_key: config.secretKeyGenerated },
      'development mode: the public development passwords (on a loopback address only) and a generated secret key are accepted; a deployment sets SERVICE_ENV=production (docs/deploy.md)',
    );
  };
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    service.log.info({ signal }, 'shutting down');
    const hard = setTimeout(() => {
      service.log.error('shutdown took too long, exiting');
      process.exit(1);
    }, 10_000);
    hard.unref();
    // within the hard limit above: the grace (STOP_GRACE_MS, 8 s) and the closing after it
    service
      .stop()
      .then(() => {
        service.log.info('stopped');
        process.exit(0);
      })
      .catch((err) => {
        service.log.error({ err }, 'shutdown failed');
        process.exit(1);
      });
  };
  onStopSignal(shutdown);
  try {
    await service.start();
  } catch (err) {
    process.stderr.write(`cannot start: ${(err as Error).message}\n`);
    process.exit(1);
  }
  service.booted().then(
    async () => {
      await warnDevelopment();
      // a stop before the end of boot ends the boot too: that is no readiness to announce
      if (service.state.bootComplete && !service.state.stopping) service.log.info({ url: config.publicUrl, admin: config.adminUser }, 'ready');
    },
    async (err) => {
      if (!service.state.stopping) service.log.error({ reason: (err as Error).message }, 'boot failed; /readyz stays 503');
      await warnDevelopment();
    },
  );
}

main().catch((err) => {
  process.stderr.write(`fatal: ${(err as Error).message}\n`);
  process.exit(1);
});
