/**
 * The one HTML escaper: `& < > " '` as `&amp; &lt; &gt; &quot; &#39;`, safe in element text and
 * in quoted attribute values alike (pages, emails, template variables).
 */
const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ENTITIES[c]!);
}
