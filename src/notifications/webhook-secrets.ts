import { sha256 } from '../digest.js';
import type { Knex } from 'knex';
import type { Logger } from '../log.js';
import type { LockableSecret } from '../http/secret-routes.js';
import type { CommandPath } from '../iam/commands.js';
import type { Actor } from '../iam/policy.js';
import { STALE_MASTER_KEY } from '../iam/secrets.js';
import { tokenMatches, type ScmProvider } from './scm/index.js';

/**
 * The SCM webhook's secrets (docs/notifications.md): the shared one and each forge's own, the
 * environment first, then the encrypted store; which one verifies a forge's deliveries; and
 * their one writer, which the settings API and the CLI both use (each change an audit event,
 * by whoever acts, never naming the value).
 */

export const SCM_PROVIDERS: readonly ScmProvider[] = ['gitea', 'github', 'gitlab'];
export const WEBHOOK_SECRET_NAMESPACE = 'core/settings';
/** the shared secret's key in the store (and its API name) */
export const WEBHOOK_SECRET_KEY = 'scm_webhook_secret';
/** a forge's own secret in the store (and its API name): scm_webhook_secret_github */
export const forgeSecretKey = (forge: ScmProvider): string => `${WEBHOOK_SECRET_KEY}_${forge}`;
/**
 * `<a secret's key>_sent_in_clear` holds the SHA-256 of that secret's value once it has arrived
 * as a GitLab token: that value never verifies a GitHub or Gitea signature again. One mark per
 * secret, so instances marking at once write the same row; a new value is not marked.
 */
const SENT_IN_CLEAR = '_sent_in_clear';
export const FORGE_NAME: Record<ScmProvider, string> = { gitea: 'Gitea', github: 'GitHub', gitlab: 'GitLab' };

/** The encrypted settings store (IamComponent.secrets). */
export interface SecretStore {
  get(namespace: string, key: string): Promise<string | null>;
  getAll(namespace: string): Promise<Record<string, string>>;
  unreadable(namespace: string): Promise<string[]>;
  /** the database's master key is no longer this instance's (rotated while it ran) */
  stale(): Promise<boolean>;
  set(namespace: string, key: string, value: string, trx?: Knex): Promise<void>;
  delete(namespace: string, key: string, trx?: Knex): Promise<void>;
}

/** The webhook secrets as they stand: environment first, then the store. */
export interface SecretsView {
  shared: string | null;
  own: Record<ScmProvider, string | null>;
  /** SHA-256 of every value GitLab has sent in clear (the marks) */
  sentInClear: Set<string>;
}

/** The secret a forge's deliveries are verified with, and why it may not be, if it may not. */
export interface ForgeKey {
  value: string;
  source: 'own' | 'shared';
  refused: null | 'gitlab_secret' | 'sent_in_clear';
}

/**
 * A forge's own secret, else the shared one. GitHub and Gitea never verify with a value GitLab
 * sends in clear: GitLab's own secret, or any value marked as having arrived as a GitLab token
 * (the shared secret, once a GitLab delivery has carried it).
 */
export function keyOf(forge: ScmProvider, v: SecretsView): ForgeKey | null {
  const own = v.own[forge];
  const value = own ?? v.shared;
  if (!value) return null;
  let refused: ForgeKey['refused'] = null;
  if (forge !== 'gitlab') {
    if (v.own.gitlab !== null && value === v.own.gitlab) refused = 'gitlab_secret';
    else if (v.sentInClear.has(sha256(value))) refused = 'sent_in_clear';
  }
  return { value, source: own ? 'own' : 'shared', refused };
}

export function forgeRefusal(forge: ScmProvider, key: ForgeKey): string {
  const why = key.refused === 'gitlab_secret' ? "it is also GitLab's secret, which GitLab sends in clear" : 'GitLab has sent it in clear as its token';
  return `${FORGE_NAME[forge]} deliveries are not verified with the ${key.source === 'own' ? `${FORGE_NAME[forge]} webhook secret` : 'shared webhook secret'}: ${why}; give ${FORGE_NAME[forge]} its own secret (${forgeSecretKey(forge)})`;
}

export interface WebhookSecretsDeps {
  secrets: SecretStore;
  log: Logger;
  /** SERVICE_SCM_WEBHOOK_SECRET; when set it wins and the settings API cannot change it */
  envSecret: string | null;
  /** SERVICE_SCM_WEBHOOK_SECRET_<FORGE>: the same, per forge */
  envForgeSecrets?: Partial<Record<ScmProvider, string | null>>;
  /** setting or clearing a secret runs here (its event in its transaction) */
  commands: CommandPath;
}

export class WebhookSecrets {
  constructor(private readonly deps: WebhookSecretsDeps) {}

  /** The environment's value of the shared secret (null) or a forge's own. */
  envOf(forge: ScmProvider | null): string | null {
    return (forge ? this.deps.envForgeSecrets?.[forge] : this.deps.envSecret) || null;
  }

  /** One read of the store for a whole delivery. */
  async view(): Promise<SecretsView> {
    const stored = await this.deps.secrets.getAll(WEBHOOK_SECRET_NAMESPACE);
    const pick = (forge: ScmProvider | null) => this.envOf(forge) ?? (stored[forge ? forgeSecretKey(forge) : WEBHOOK_SECRET_KEY] || null);
    const marks = Object.keys(stored).filter((k) => k.startsWith(WEBHOOK_SECRET_KEY) && k.endsWith(SENT_IN_CLEAR));
    return {
      shared: pick(null),
      own: { gitea: pick('gitea'), github: pick('github'), gitlab: pick('gitlab') },
      sentInClear: new Set(marks.map((k) => stored[k]!)),
    };
  }

  /**
   * What of the webhook secrets is stored but does not open under the current master key
   * (written under another: an instance left running through a rotation), each said as the
   * health's warning: such a secret reads as unset, so its forge falls back to the shared one.
   */
  async unreadableWarnings(view: SecretsView): Promise<string[]> {
    // rotated while this instance ran: every secret reads as unset here, and setting one again would make it worse
    if (await this.deps.secrets.stale()) return [STALE_MASTER_KEY];
    const keys = (await this.deps.secrets.unreadable(WEBHOOK_SECRET_NAMESPACE)).map((k) => k.slice(WEBHOOK_SECRET_NAMESPACE.length + 1));
    const warnings: string[] = [];
    for (const key of keys.filter((k) => k.startsWith(WEBHOOK_SECRET_KEY))) {
      if (key.endsWith(SENT_IN_CLEAR)) {
        const of = key.slice(0, -SENT_IN_CLEAR.length);
        warnings.push(
          `the record that GitLab sent ${of} in clear does not open under the current master key: that value could verify GitHub or Gitea deliveries again; set ${of} again`,
        );
        continue;
      }
      const forge = SCM_PROVIDERS.find((f) => forgeSecretKey(f) === key) ?? null;
      if (this.envOf(forge)) continue; // the environment's value is the one read
      const fallback = !forge
        ? ''
        : view.shared
          ? `, and ${FORGE_NAME[forge]}'s deliveries are verified with the shared secret`
          : `, and ${FORGE_NAME[forge]}'s deliveries are refused (no shared secret either)`;
      warnings.push(`${key} is stored but does not open under the current master key (written under another one): it reads as unset${fallback}; set it again`);
    }
    return warnings;
  }

  /** The shared secret (null) or a forge's own, as the settings API and the CLI change it. */
  setting(forge: ScmProvider | null): LockableSecret<Actor> {
    const key = forge ? forgeSecretKey(forge) : WEBHOOK_SECRET_KEY;
    return {
      lockedByEnv: Boolean(this.envOf(forge)),
      configured: async () => Boolean(this.envOf(forge) ?? (await this.deps.secrets.get(WEBHOOK_SECRET_NAMESPACE, key))),
      set: (actor, value) => this.change(actor, key, 'set', (trx) => this.deps.secrets.set(WEBHOOK_SECRET_NAMESPACE, key, value, trx)),
      clear: (actor) => this.change(actor, key, 'cleared', (trx) => this.deps.secrets.delete(WEBHOOK_SECRET_NAMESPACE, key, trx)),
    };
  }

  /** A secret set or cleared by `actor`: an event naming it (never its value). */
  private async change(actor: Actor, key: string, change: 'set' | 'cleared', write: (trx: Knex) => Promise<void>): Promise<void> {
    await this.deps.commands.within(write, () => ({
      action: 'settings.changed',
      actor,
      target: { type: 'settings', id: key, name: key },
      details: { fields: [key], change },
    }));
  }

  /**
   * A GitLab token that is one of the secrets in use has travelled in clear: mark its value
   * (whether or not this delivery is then accepted), so it never verifies an HMAC again.
   */
  async markSentInClear(token: string | undefined, view: SecretsView, ip: string | null): Promise<void> {
    const slots: [string, string | null][] = [
      [WEBHOOK_SECRET_KEY, view.shared],
      [forgeSecretKey('gitea'), view.own.gitea],
      [forgeSecretKey('github'), view.own.github],
    ];
    for (const [key, value] of slots) {
      if (!value || !tokenMatches(token, value)) continue;
      const digest = sha256(value);
      if (view.sentInClear.has(digest)) continue;
      // an instance whose master key was rotated under it cannot record it (and refuses every
      // secret write): the delivery is still answered, the next instance's sighting records it
      if (await this.deps.secrets.stale()) {
        this.deps.log.warn({ setting: key }, `a webhook secret arrived as a GitLab token (in clear), not recorded: ${STALE_MASTER_KEY}`);
        continue;
      }
      // a change of what the secret verifies, made by a delivery: an event like any other change of it
      await this.deps.commands.within(
        (trx) => this.deps.secrets.set(WEBHOOK_SECRET_NAMESPACE, `${key}${SENT_IN_CLEAR}`, digest, trx),
        () => ({
          action: 'settings.changed',
          actor: { user_id: null, username: 'webhook:gitlab', method: 'webhook', ip },
          target: { type: 'settings', id: key, name: key },
          details: { fields: [key], change: 'sent_in_clear' },
        }),
      );
      view.sentInClear.add(digest);
      this.deps.log.warn({ setting: key }, 'a webhook secret arrived as a GitLab token (in clear): it no longer verifies GitHub or Gitea deliveries');
    }
  }
}
