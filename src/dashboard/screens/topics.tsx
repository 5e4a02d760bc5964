/** Topics (double opt-in per topic) and sign-up forms with their embed code. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCanWrite, useListPage } from '../ui.js';

interface Topic {
  id: string;
  name: string;
  requireDoubleOptIn: boolean;
}
interface Form {
  id: string;
  name: string;
  topicId: string | null;
  doubleOptIn: boolean;
  active: boolean;
  requiredFields: string[];
  honeypotField: string;
}

/** The HTML an operator pastes into a site: a plain POST form, works without scripts. */
export function embedCode(origin: string, f: Form): string {
  return `<form action="${origin}/forms/${f.id}" method="post">
  <label>Email <input type="email" name="email" required></label>
  <label>First name <input type="text" name="firstName"></label>
  <input type="text" name="${f.honeypotField}" tabindex="-1" autocomplete="off" style="position:absolute;left:-9999px" aria-hidden="true">
  <button type="submit">Subscribe</button>
</form>`;
}

export function Topics() {
  const topics = useListPage(() => api<{ data: Topic[] }>('GET', '/admin/topics'), []);
  const forms = useListPage(() => api<{ data: Form[] }>('GET', '/admin/forms'), []);
  const canWrite = useCanWrite('topics');
  const [name, setName] = useState('');
  const [doi, setDoi] = useState(false);
  const add = useAction();
  const toggle = useAction();
  const [formName, setFormName] = useState('');
  const [formTopic, setFormTopic] = useState('');
  const [formDoi, setFormDoi] = useState(true);
  const addForm = useAction();
  const topicName = (id: string | null) => topics.data?.data.find((t) => t.id === id)?.name ?? '—';
  return (
    <Screen title="Topics and forms">
      <h2>Topics</h2>
      <ErrorBox error={topics.error ?? toggle.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Topics</caption>
          <thead>
            <tr>
              <th scope="col">Topic</th>
              <th scope="col">Double opt-in</th>
            </tr>
          </thead>
          <tbody>
            {topics.rows.map((t) => (
              <tr key={t.id}>
                <td>{t.name}</td>
                <td>
                  <label class="radio">
                    <input
                      type="checkbox"
                      checked={t.requireDoubleOptIn}
                      disabled={!canWrite || toggle.busy}
                      onChange={(e) => {
                        const v = e.currentTarget.checked;
                        void toggle.run(async () => {
                          await api('PATCH', `/admin/topics/${t.id}`, { requireDoubleOptIn: v });
                          topics.reload();
                        });
                      }}
                    />
                    Require confirmation for {t.name}
                  </label>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Pager p={topics.pager} label="Topics" />
      {canWrite ? (
        <form
          class="card row"
          aria-label="New topic"
          onSubmit={(e) => {
            e.preventDefault();
            void add.run(async () => {
              await api('POST', '/admin/topics', { name, requireDoubleOptIn: doi });
              setName('');
              topics.reload();
            });
          }}
        >
          <Field label="New topic name">
            <input required value={name} onInput={(e) => setName(e.currentTarget.value)} />
          </Field>
          <label class="radio">
            <input type="checkbox" checked={doi} onChange={(e) => setDoi(e.currentTarget.checked)} />
            Double opt-in
          </label>
          <button type="submit" disabled={add.busy}>
            Add topic
          </button>
          <ErrorBox error={add.error} />
        </form>
      ) : null}

      <h2>Sign-up forms</h2>
      <ErrorBox error={forms.error} />
      {forms.data && !forms.rows.length ? <Notice>No forms yet.</Notice> : null}
      {forms.rows.map((f) => (
        <article class="card" key={f.id} aria-labelledby={`form-${f.id}`}>
          <h3 id={`form-${f.id}`}>{f.name}</h3>
          <p>
            Topic: {topicName(f.topicId)} · {f.doubleOptIn ? 'double opt-in (a confirmation email is sent)' : 'single opt-in'} · {f.active ? 'active' : 'inactive'}
          </p>
          <Field label={`Embed code for ${f.name}`}>
            <textarea readOnly rows={6} value={embedCode(location.origin, f)} onFocus={(e) => e.currentTarget.select()} />
          </Field>
        </article>
      ))}
      <Pager p={forms.pager} label="Forms" />
      {canWrite ? (
        <form
          class="card row"
          aria-label="New form"
          onSubmit={(e) => {
            e.preventDefault();
            void addForm.run(async () => {
              await api('POST', '/admin/forms', { name: formName, topicId: formTopic || undefined, doubleOptIn: formDoi });
              setFormName('');
              forms.reload();
            });
          }}
        >
          <Field label="New form name">
            <input required value={formName} onInput={(e) => setFormName(e.currentTarget.value)} />
          </Field>
          <Field label="Form topic">
            <select value={formTopic} onChange={(e) => setFormTopic(e.currentTarget.value)}>
              <option value="">No topic</option>
              {topics.data?.data.map((t) => (
                <option key={t.id} value={t.id}>
                  {t.name}
                </option>
              ))}
            </select>
          </Field>
          <label class="radio">
            <input type="checkbox" checked={formDoi} onChange={(e) => setFormDoi(e.currentTarget.checked)} />
            Form double opt-in
          </label>
          <button type="submit" disabled={addForm.busy}>
            Add form
          </button>
          <ErrorBox error={addForm.error} />
        </form>
      ) : null}
    </Screen>
  );
}
