/**
 * The shell of every page people see: one small document, inline CSS and JS allowed by hash
 * in a strict Content-Security-Policy (no external resources, nothing to load but the JSON
 * endpoint the script calls). Pages carry no per-person data in the HTML: the script reads
 * the token from the URL, calls the JSON endpoint and fills the page with textContent, so
 * nothing the API returns is ever parsed as HTML (archive and share bodies go into a
 * sandboxed iframe without scripts).
 */
import { createHash } from 'node:crypto';
import { escapeHtml } from '../../shared/html.js';

const CSS = `
:root{color-scheme:light dark;--fg:#1c1c1e;--muted:#5b5b66;--bg:#f6f6f8;--card:#fff;--line:#d9d9de;--accent:#1f5fbf;--accent-fg:#fff;--danger:#b3261e;--ok:#1e7a35}
@media (prefers-color-scheme:dark){:root{--fg:#f2f2f5;--muted:#b4b4bd;--bg:#151518;--card:#1f1f24;--line:#3a3a42;--accent:#7fb0ff;--accent-fg:#0b1b33;--danger:#ff8a80;--ok:#7ddc8f}}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
main{max-width:36rem;margin:0 auto;padding:1.5rem 1rem 3rem}
main.wide{max-width:56rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:1.25rem}
h1{font-size:1.4rem;line-height:1.25;margin:0 0 .75rem}
p{margin:.5rem 0}
.org{color:var(--muted);font-size:.9rem;margin:0 0 1rem}
.muted{color:var(--muted)}
button,.button{display:inline-block;min-height:44px;padding:.65rem 1.1rem;border-radius:8px;border:1px solid var(--accent);background:var(--accent);color:var(--accent-fg);font:inherit;font-weight:600;cursor:pointer;text-decoration:none}
button.secondary{background:transparent;color:var(--accent)}
button[disabled]{opacity:.6;cursor:default}
button:focus-visible,a:focus-visible,input:focus-visible{outline:3px solid var(--accent);outline-offset:2px}
a{color:var(--accent)}
.actions{display:flex;flex-wrap:wrap;gap:.75rem;margin-top:1.25rem}
.status{margin-top:1rem;min-height:1.5em;font-weight:600}
.status.ok{color:var(--ok)}.status.error{color:var(--danger)}
fieldset{border:0;margin:1rem 0 0;padding:0}
legend{font-weight:600;margin-bottom:.5rem;padding:0}
.topic{display:flex;gap:.75rem;align-items:flex-start;padding:.75rem 0;border-top:1px solid var(--line)}
.topic:first-of-type{border-top:0}
.topic input{width:1.35rem;height:1.35rem;margin:.1rem 0 0;flex:none}
.topic label{flex:1;cursor:pointer}
.hint{display:block;color:var(--muted);font-size:.875rem}
.meta{color:var(--muted);font-size:.9rem;margin:.25rem 0 1rem;overflow-wrap:anywhere}
iframe{display:block;width:100%;min-height:60vh;border:1px solid var(--line);border-radius:8px;background:#fff}
[hidden]{display:none!important}
`;

const sha256 = (s: string): string => `'sha256-${createHash('sha256').update(s).digest('base64')}'`;
const CSS_HASH = sha256(CSS);

export interface PageSpec {
  title: string;
  /** Static markup of <main> (no per-person data). */
  body: string;
  /** Inline script (static); reads what it needs from location. */
  script: string;
  /** Archive and share: the iframe shows the customer's HTML, which needs inline styles and images from anywhere. */
  content?: boolean;
  wide?: boolean;
}

export interface RenderedPage {
  html: string;
  headers: Record<string, string>;
}

export function renderPage(p: PageSpec): RenderedPage {
  const csp = [
    "default-src 'none'",
    `script-src ${sha256(p.script)}`,
    p.content ? "style-src 'unsafe-inline' https: http:" : `style-src ${CSS_HASH}`,
    p.content ? 'img-src * data: blob:' : "img-src 'self' data:",
    p.content ? 'font-src * data:' : "font-src 'none'",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<meta name="referrer" content="no-referrer">
<title>${escapeHtml(p.title)}</title>
<style>${CSS}</style>
</head>
<body>
<main${p.wide ? ' class="wide"' : ''}>
${p.body}
</main>
<script>${p.script}</script>
</body>
</html>`;
  return {
    html,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'content-security-policy': csp,
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'DENY',
      'referrer-policy': 'no-referrer',
    },
  };
}

/**
 * Shared client helpers, prepended to every page script: call a JSON endpoint and return
 * `{ ok, status, body }` (a network failure is status 0); show a status message.
 */
export const CLIENT_HELPERS = `
function $(id){return document.getElementById(id)}
async function api(method,url,body,form){
  var o={method:method,headers:{accept:'application/json'},credentials:'omit'};
  if(form){o.headers['content-type']='application/x-www-form-urlencoded';o.body=form}
  else if(body!==undefined){o.headers['content-type']='application/json';o.body=JSON.stringify(body)}
  try{var r=await fetch(url,o);var j=null;try{j=await r.json()}catch(e){}return {ok:r.ok,status:r.status,body:j}}
  catch(e){return {ok:false,status:0,body:null}}
}
function errorText(res){
  if(res.status===0)return 'We could not reach the server. Check your connection and try again.';
  if(res.body&&res.body.error&&res.body.error.message)return res.body.error.message;
  return 'Something went wrong (HTTP '+res.status+'). Please try again.';
}
function show(id,text,kind){var el=$(id);el.textContent=text;el.className='status'+(kind?' '+kind:'')}
function fmtDate(ms){try{return new Date(ms).toLocaleString(undefined,{dateStyle:'long',timeStyle:'short'})}catch(e){return new Date(ms).toISOString()}}
`;
