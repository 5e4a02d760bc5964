/** Templates: list, editor with live preview at desktop and phone widths, test send, share link. */
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { navigate } from '../router.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCanWrite, useListPage, useLoad, when } from '../ui.js';

interface Template {
  id: string;
  name: string;
  subject: string;
  html: string;
  previewText: string;
  updatedAt: string;
}

export function Templates({ id }: { id?: string }) {
  return id ? <Editor id={id} /> : <TemplateList />;
}

function TemplateList() {
  const l = useListPage(() => api<{ data: Template[] }>('GET', '/admin/templates'), []);
  const canWrite = useCanWrite('templates');
  return (
    <Screen title="Templates" actions={canWrite ? <a class="button primary" href="/templates/new">New template</a> : null}>
      <ErrorBox error={l.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Templates</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Subject</th>
              <th scope="col">Changed</th>
            </tr>
          </thead>
          <tbody>
            {l.rows.map((t) => (
              <tr key={t.id}>
                <td>
                  <a href={`/templates/${t.id}`}>{t.name}</a>
                </td>
                <td>{t.subject}</td>
                <td>{when(t.updatedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {l.data && !l.rows.length ? <Notice>No templates yet.</Notice> : null}
      <Pager p={l.pager} label="Templates" />
    </Screen>
  );
}

const STARTER = `<!doctype html>
<html><body style="font-family:system-ui,sans-serif;margin:0;padding:24px;background:#f6f7f9">
<div style="max-width:560px;margin:auto;background:#fff;padding:24px;border-radius:8px">
<h1 style="margin-top:0">Hello {{firstName}}</h1>
<p>Write your message here.</p>
</div></body></html>`;

function Editor({ id }: { id: string }) {
  const isNew = id === 'new';
  const canWrite = useCanWrite('templates');
  const t = useLoad(() => (isNew ? Promise.resolve(null) : api<{ data: Template }>('GET', `/admin/templates/${id}`)), [id]);
  const [form, setForm] = useState({ name: '', subject: '', previewText: '', html: STARTER });
  const [width, setWidth] = useState<'desktop' | 'phone'>('desktop');
  const [preview, setPreview] = useState(form.html);
  const save = useAction();
  const [saved, setSaved] = useState<string | null>(null);
  useEffect(() => {
    const d = t.data?.data;
    if (d) setForm({ name: d.name, subject: d.subject, previewText: d.previewText, html: d.html });
  }, [t.data]);
  // The preview follows the editor after a short pause, not on every keystroke.
  useEffect(() => {
    const h = setTimeout(() => setPreview(form.html), 250);
    return () => clearTimeout(h);
  }, [form.html]);
  const set = (k: keyof typeof form) => (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });

  const submit = (e: Event) => {
    e.preventDefault();
    void save.run(async () => {
      if (isNew) {
        const r = await api<{ data: Template }>('POST', '/admin/templates', form);
        navigate(`/templates/${r.data.id}`, true);
      } else {
        await api('PATCH', `/admin/templates/${id}`, form);
      }
      setSaved('Template saved.');
    });
  };
  return (
    <Screen title={isNew ? 'New template' : form.name || 'Template'} actions={<a href="/templates">All templates</a>}>
      <ErrorBox error={t.error} />
      <div class="editor">
        <form class="card" onSubmit={submit} aria-label="Template">
          <fieldset disabled={!canWrite}>
            <Field label="Name">
              <input name="name" required value={form.name} onInput={set('name')} />
            </Field>
            <Field label="Subject">
              <input name="subject" required value={form.subject} onInput={set('subject')} />
            </Field>
            <Field label="Preview text" hint="Shown after the subject in most inboxes.">
              <input name="previewText" value={form.previewText} onInput={set('previewText')} />
            </Field>
            <Field label="HTML">
              <textarea name="html" rows={16} spellcheck={false} required value={form.html} onInput={set('html')} />
            </Field>
            <ErrorBox error={save.error} />
            {saved && !save.error ? <Notice>{saved}</Notice> : null}
            <button type="submit" class="primary" disabled={save.busy}>
              {isNew ? 'Create template' : 'Save template'}
            </button>
          </fieldset>
        </form>
        <div class="preview">
          <div role="radiogroup" aria-label="Preview width" class="row">
            {(['desktop', 'phone'] as const).map((w) => (
              <label key={w} class="radio">
                <input type="radio" name="width" value={w} checked={width === w} onChange={() => setWidth(w)} />
                {w === 'desktop' ? 'Desktop (600 px)' : 'Phone (375 px)'}
              </label>
            ))}
          </div>
          {/* Sandboxed without scripts: the e-mail's own HTML cannot run or reach the dashboard. */}
          <iframe title="Template preview" class={`frame ${width}`} sandbox="" srcDoc={preview} />
        </div>
      </div>
      {!isNew && t.data ? (
        <div class="split">
          {canWrite ? <TestSend id={id} /> : null}
          {canWrite ? <ShareLink id={id} /> : null}
        </div>
      ) : null}
    </Screen>
  );
}

function TestSend({ id }: { id: string }) {
  const [to, setTo] = useState('');
  const [from, setFrom] = useState(localStorage.getItem('lm_test_from') ?? '');
  const a = useAction();
  const [sent, setSent] = useState<string | null>(null);
  return (
    <form
      class="card"
      aria-labelledby="test-title"
      onSubmit={(e) => {
        e.preventDefault();
        setSent(null);
        void a.run(async () => {
          localStorage.setItem('lm_test_from', from);
          const r = await api<{ data: { id: string; status: string } }>('POST', `/admin/templates/${id}/test-send`, { to, from });
          setSent(`Test sent to ${to} (send ${r.data.id}, ${r.data.status}).`);
        });
      }}
    >
      <h2 id="test-title">Send a test</h2>
      <Field label="From">
        <input name="from" required placeholder="Acme <news@acme.example>" value={from} onInput={(e) => setFrom(e.currentTarget.value)} />
      </Field>
      <Field label="To">
        <input name="to" type="email" required value={to} onInput={(e) => setTo(e.currentTarget.value)} />
      </Field>
      <ErrorBox error={a.error} />
      {sent ? <Notice>{sent}</Notice> : null}
      <button type="submit" disabled={a.busy}>
        Send test
      </button>
    </form>
  );
}

function ShareLink({ id }: { id: string }) {
  const a = useAction();
  const [link, setLink] = useState<{ url: string; expiresAt: string } | null>(null);
  return (
    <section class="card" aria-labelledby="share-title">
      <h2 id="share-title">Share for review</h2>
      <p>A link to this version of the template, for people without an account.</p>
      <button type="button" disabled={a.busy} onClick={() => a.run(async () => setLink((await api<{ data: { url: string; expiresAt: string } }>('POST', `/admin/templates/${id}/share-links`)).data))}>
        Create share link
      </button>
      <ErrorBox error={a.error} />
      {link ? (
        <Field label="Share link" hint={`Expires ${when(link.expiresAt)}.`}>
          <input readOnly value={link.url} onFocus={(e) => e.currentTarget.select()} />
        </Field>
      ) : null}
    </section>
  );
}
