import type { Logger } from '../../log.js';

/**
 * The LDAP settings that leave the directory's traffic open, as warnings: logged once per process
 * at the chain's build (ldap.ts), and said by the settings API and test connection
 * (ldap-diagnose.ts, src/auth/routes/auth-settings*.ts).
 */

/** The LDAP part of the settings the warnings are read from (Config.ldap). */
export interface LdapWarningInput {
  url: string | null;
  tlsVerify: boolean;
  startTls: boolean;
}

/** A setting that leaves the directory's traffic open: the field, its variable, what it means (naming the setting in both forms: it may be set in either). */
export interface LdapWarning {
  field: string;
  env: string;
  message: string;
}

/** Certificate checks off, or a plain ldap:// server without StartTLS: passwords readable or the directory impersonable on the way. */
export function ldapWarnings(l: LdapWarningInput): LdapWarning[] {
  if (!l.url) return [];
  const out: LdapWarning[] = [];
  const plain = l.url.split(/\s+/).filter((u) => u.startsWith('ldap://'));
  if (plain.length && !l.startTls) {
    out.push({
      field: 'ldap_url',
      env: 'SERVICE_LDAP_URL',
      message: `${plain.join(', ')} ${plain.length > 1 ? 'are' : 'is'} plain ldap:// without StartTLS: the bind password and every password typed at sign-in cross the network in clear text (use ldaps://, or turn on ldap_starttls, SERVICE_LDAP_STARTTLS)`,
    });
  }
  if (!l.tlsVerify) {
    out.push({
      field: 'ldap_tls_verify',
      env: 'SERVICE_LDAP_TLS_VERIFY',
      message:
        "certificate verification is off (ldap_tls_verify, SERVICE_LDAP_TLS_VERIFY): the directory's certificate is not checked, so anyone on the network path can pose as the directory and read the passwords (trust a private CA with SERVICE_LDAP_CA_CERT instead)",
    });
  }
  return out;
}

/** the warnings said, by the logger of the chain that said them: one chain per service */
const warnedBy = new WeakMap<object, Set<string>>();

/**
 * Logs each warning once per chain (`chainLog`, the logger the service's login chain builds its
 * providers with: a rebuild with the same settings says nothing again, another service in the
 * same process says it for itself), on `log`.
 */
export function logLdapWarningsOnce(l: LdapWarningInput, chainLog: object, log: Logger): void {
  let warned = warnedBy.get(chainLog);
  if (!warned) warnedBy.set(chainLog, (warned = new Set()));
  for (const w of ldapWarnings(l)) {
    if (warned.has(w.message)) continue;
    warned.add(w.message);
    log.warn({ event: 'ldap_insecure_setting', field: w.field, env: w.env }, `ldap: ${w.message}`);
  }
}
