import { loadConfig, ConfigError } from './config.js';
import { Service } from './service.js';

/** Process entry: config -> service -> listen; SIGTERM / SIGINT drain and exit 0 within 10 s. */
async function main() {
  let config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const service = new Service(config);
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
    service
      .stop(8000)
      .then(() => {
        service.log.info('stopped');
        process.exit(0);
      })
      .catch((err) => {
        service.log.error({ err }, 'shutdown failed');
        process.exit(1);
      });
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  try {
    await service.start();
  } catch (err) {
    process.stderr.write(`cannot start: ${(err as Error).message}\n`);
    process.exit(1);
  }
  service.booted().then(
    () => service.log.info({ url: config.publicUrl, admin: config.adminUser }, 'ready'),
    (err) => service.log.error({ reason: (err as Error).message }, 'boot failed; /readyz stays 503'),
  );
}

main().catch((err) => {
  process.stderr.write(`fatal: ${(err as Error).message}\n`);
  process.exit(1);
});
