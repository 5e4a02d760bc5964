import { describe, expect, it } from 'vitest';
import { escapeHtml } from '../../src/shared/html.js';
import { doiEmail } from '../../src/backend/api/doi.js';
import { render } from '../../src/backend/api/template.js';

describe('escapeHtml', () => {
  it('writes the five characters as named entities, the apostrophe as &#39;', () => {
    expect(escapeHtml(`<a href="x">Tom & Jerry's</a>`)).toBe('&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;');
  });

  it('is the one encoding: the DOI email and template variables write the same bytes', () => {
    const hostile = `Tom & "Jerry's" <b>`;
    const expected = 'Tom &amp; &quot;Jerry&#39;s&quot; &lt;b&gt;';
    const mail = doiEmail({ topicName: hostile, organizationName: 'Acme', url: 'https://a.example/confirm?x=1&y=2' });
    expect(mail.html).toContain(`&ldquo;${expected}&rdquo;`);
    expect(mail.html).toContain('href="https://a.example/confirm?x=1&amp;y=2"');
    expect(render('{{ v }}', { v: hostile }, true)).toBe(expected);
  });
});
