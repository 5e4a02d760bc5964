import addressparser from 'nodemailer/lib/addressparser';

/** Practical address check: one local part (no spaces or controls) @ a dotted host name. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what must be refused
const ADDRESS = /^[^\s@<>(),;:"\\[\]\x00-\x1f\x7f]{1,64}@(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/i;

export function isAddress(s: string): boolean {
  return s.length <= 254 && ADDRESS.test(s);
}

/**
 * The single mailbox of an address field (`a@b` or `Name <a@b>`), or null when the field
 * holds anything else (no address, several, a group, line breaks).
 */
export function parseMailbox(field: string): { name: string; address: string } | null {
  if (/[\r\n]/.test(field)) return null;
  const list = addressparser(field);
  if (list.length !== 1) return null;
  const entry = list[0]!;
  if (entry.group !== undefined || !entry.address || !isAddress(entry.address)) return null;
  return { name: entry.name, address: entry.address };
}

/** Lowercase domain of an address or of the last `<…>` in a field; '' when there is none. Hot path: no parsing. */
export function domainOf(field: string): string {
  const lt = field.lastIndexOf('<');
  const addr = lt >= 0 ? field.slice(lt + 1, field.indexOf('>', lt) >= 0 ? field.indexOf('>', lt) : undefined) : field;
  const at = addr.lastIndexOf('@');
  return at >= 0 ? addr.slice(at + 1).trim().toLowerCase() : '';
}
