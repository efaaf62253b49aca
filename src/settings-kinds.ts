/**
 * What the rows of the settings table (src/settings-table.ts, src/settings-table-auth.ts) are made
 * of: a row's shape, the name rules and the durations they check. Both parts import it, so neither
 * imports the other's rules.
 */
import net from 'node:net';
import Joi from 'joi';
import type { SettingKind } from './client/api-types.js';

export const USERNAME = /^[A-Za-z0-9._@-]{1,64}$/;
export const GROUP_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/** The two rules in words, as every refusal and form states them. */
export const USERNAME_WORDS = '1 to 64 characters: letters A-Z and a-z, digits and . _ @ - (no spaces)';
export const GROUP_NAME_WORDS = '1 to 64 characters: letters A-Z and a-z, digits and . _ -, starting with a letter or digit (no spaces)';

/** A username and a group name as every input takes them: a refusal says the rule. */
export const usernameRule = Joi.string()
  .pattern(USERNAME)
  .messages({ 'string.pattern.base': `must be ${USERNAME_WORDS}` });
export const groupNameRule = Joi.string()
  .pattern(GROUP_NAME)
  .messages({ 'string.pattern.base': `must be a group name of ${GROUP_NAME_WORDS}` });

/**
 * How a value is written: `list` is comma separated in the environment (a JSON array or a comma
 * separated string through the API), `mapping` is a JSON object, `secret` is never shown back.
 */
export type { SettingKind };

export interface SettingDef {
  env: string;
  kind: SettingKind;
  /** the rule of the value (a list: the array; booleans need none) */
  rule?: Joi.Schema;
  /** as written in the environment; absent: unset */
  default?: string;
  /** the README's default column, when the default is worked out at start */
  defaultText?: string;
  about: string;
  /** set also through the API (and the CLI) under this name; the environment then locks it */
  api?: string;
  /** the Authentication page's label */
  label?: string;
  /** where an auth setting lives in Config (and in the resolved auth settings) */
  path?: string;
}

const DURATION = /^(\d+)(ms|s|m|h|d)?$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDuration(value: string): number | null {
  const m = DURATION.exec(value.trim());
  if (!m) return null;
  return Number(m[1]) * UNIT_MS[m[2] ?? 's'];
}

/** The URLs of a space-separated list that are not ldap:// or ldaps:// URLs with a host (each named in the message). */
export function badLdapUrls(list: string): string[] {
  return list
    .split(/\s+/)
    .filter(Boolean)
    .filter((u) => {
      try {
        const url = new URL(u);
        return !['ldap:', 'ldaps:'].includes(url.protocol) || url.hostname === '' || (url.pathname !== '' && url.pathname !== '/') || url.search !== '';
      } catch {
        return true;
      }
    });
}

/** A space-separated list of ldap:// and ldaps:// URLs (the settings table checks it with the same rule). */
export const ldapUrlList = Joi.string()
  .trim()
  .max(2048)
  .custom((text: string) => {
    const urls = text.split(/\s+/).filter(Boolean);
    if (urls.length === 0) throw new Error('must name at least one ldap:// or ldaps:// URL');
    const bad = badLdapUrls(text);
    if (bad.length) throw new Error(`must be ldap:// or ldaps:// URLs separated by spaces, not ${bad.map((u) => JSON.stringify(u)).join(', ')}`);
    if (new Set(urls).size !== urls.length) throw new Error('names a URL twice');
    return urls.join(' ');
  })
  .messages({ 'any.custom': '{{#label}} {{#error.message}}' });

// The two rules below check what every start reads (the listen address, the URLs of the service,
// its database and its Redis) with Node's own parsers, as pg, the Redis client and the origin
// checks read them. joi's hostname() and uri() test a value against large regular expressions (an IP
// address's, RFC 3986's, one per scheme list) that V8 compiles at their first use: about 25 ms of
// every start for each.

/** RFC 3986's characters: anything else (a space, `<password>` left from a template) must be percent-encoded. */
const URL_TEXT = /^(?:[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$/;

/**
 * A URL with one of `schemes`, as Node's URL parser reads it, written in RFC 3986's characters,
 * its scheme in lower case and a host after `//`: what reads these values afterwards also
 * compares their text (the database's dialect by its prefix, `https:` for secure cookies, the
 * Redis client's `rediss://` for TLS), which an upper-case `HTTPS://` or a repaired `https:host`
 * would pass the parser and fail there.
 */
export const urlWithScheme = (schemes: readonly string[]) =>
  Joi.string()
    .custom((text: string) => {
      if (!URL_TEXT.test(text)) throw new Error('must be a URL, with spaces and characters such as < > " { } | percent-encoded');
      let url: URL;
      try {
        url = new URL(text);
      } catch {
        throw new Error(`must be a ${schemes.join(' or ')} URL`);
      }
      if (!schemes.includes(url.protocol.slice(0, -1))) throw new Error(`must be a ${schemes.join(' or ')} URL, not ${url.protocol}`);
      if (!text.startsWith(url.protocol)) throw new Error(`must begin with its scheme in lower case, ${url.protocol}`);
      if (url.host && !text.startsWith(`${url.protocol}//`)) throw new Error(`must name its host after ${url.protocol}//`);
      return text;
    })
    .messages({ 'any.custom': '{{#label}} {{#error.message}}' });

const domainName = Joi.string().domain({ minDomainSegments: 1, tlds: false });

/** An IP address (v4 or v6) or a host name: what joi's hostname() accepts. */
export const hostName = Joi.string()
  .custom((text: string) => {
    if (net.isIP(text) || !domainName.validate(text).error) return text;
    throw new Error('must be an IP address or a host name');
  })
  .messages({ 'any.custom': '{{#label}} {{#error.message}}' });
