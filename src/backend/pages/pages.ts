/**
 * The pages people reach from emails: unsubscribe, preference center, double opt-in
 * confirmation, archive (view in browser) and share preview. Each is static HTML (rendered
 * once, cacheable) whose script calls the public JSON endpoints.
 */
import { CLIENT_HELPERS, renderPage, type RenderedPage } from './layout.js';

const LOADING = '<p id="loading" class="muted" role="status">Loading…</p>';
const ERROR_CARD = `<div id="failed" class="card" hidden><h1>This link does not work</h1><p id="failed-msg" role="alert"></p>
<p class="muted">If you copied the link from an email, check that it is complete.</p></div>`;

/** The last path segment (the token of /unsub/:token, /prefs/:token, /archive/:token, /share/:token). */
const PATH_TOKEN = `var token=decodeURIComponent(location.pathname.replace(/\\/+$/,'').split('/').pop()||'');var enc=encodeURIComponent(token);`;
const FAIL = `function fail(res){$('loading').hidden=true;$('failed').hidden=false;$('failed-msg').textContent=errorText(res)}`;

function unsubscribe(done: boolean): RenderedPage {
  return renderPage({
    title: 'Unsubscribe',
    body: `${LOADING}${ERROR_CARD}
<div id="ask" class="card" hidden>
  <p id="org" class="org"></p>
  <h1 id="ask-title">Unsubscribe?</h1>
  <p>Stop sending <strong id="ask-email"></strong> emails from <strong id="ask-topic"></strong>.</p>
  <div class="actions"><button id="unsub" type="button">Unsubscribe</button></div>
  <p id="status" class="status" role="status" aria-live="polite"></p>
</div>
<div id="done" class="card" hidden>
  <p id="org2" class="org"></p>
  <h1 tabindex="-1" id="done-title">You are unsubscribed</h1>
  <p><strong id="done-email"></strong> will no longer get emails from <strong id="done-topic"></strong>.</p>
  <p id="prefs-line" hidden>Changed your mind, or want to choose what you get? <a id="prefs-link" href="#">Manage your subscriptions</a>.</p>
</div>
<noscript><div class="card">${
      done
        ? '<h1>You are unsubscribed</h1><p>You will no longer get these emails.</p>'
        : `<h1>Unsubscribe?</h1><p>Press the button to stop getting these emails.</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><input type="hidden" name="via" value="page"><div class="actions"><button type="submit">Unsubscribe</button></div></form>`
    }</div></noscript>`,
    script: `${CLIENT_HELPERS}${PATH_TOKEN}${FAIL}
var ctx=null;
function fill(d){
  var topic=d.topic?d.topic.name:(d.organizationName+' (all lists)');
  $('org').textContent=$('org2').textContent=d.organizationName;
  $('ask-email').textContent=$('done-email').textContent=d.email;
  $('ask-topic').textContent=$('done-topic').textContent=topic;
  if(d.preferencesUrl){$('prefs-link').href=d.preferencesUrl;$('prefs-line').hidden=false}
}
function showDone(){$('ask').hidden=true;$('done').hidden=false;$('done-title').focus()}
(async function(){
  var res=await api('GET','/unsub/verify/'+enc);
  $('loading').hidden=true;
  if(!res.ok)return fail(res);
  ctx=res.body.data;fill(ctx);
  if(ctx.unsubscribed)return showDone();
  $('ask').hidden=false;
})();
$('unsub').addEventListener('click',async function(){
  var b=this;b.disabled=true;show('status','Unsubscribing…');
  var res=await api('POST','/unsub/'+enc,undefined,'List-Unsubscribe=One-Click&via=page');
  if(res.ok){show('status','');showDone()}else{b.disabled=false;show('status',errorText(res),'error')}
});`,
  });
}

const preferences = (): RenderedPage =>
  renderPage({
    title: 'Email preferences',
    body: `${LOADING}${ERROR_CARD}
<div id="prefs" class="card" hidden>
  <p id="org" class="org"></p>
  <h1>Email preferences</h1>
  <p>Choose what <strong id="email"></strong> receives.</p>
  <form id="form">
    <fieldset><legend>Subscriptions</legend><div id="topics"></div>
    <p id="no-topics" class="muted" hidden>You are not on any list.</p></fieldset>
    <div class="actions">
      <button id="save" type="submit">Save preferences</button>
      <button id="all" type="button" class="secondary">Unsubscribe from all</button>
    </div>
    <p id="status" class="status" role="status" aria-live="polite"></p>
  </form>
</div>
<noscript><div class="card"><h1>Email preferences</h1><p>This page needs JavaScript. To stop all emails, use the unsubscribe link in the email.</p></div></noscript>`,
    script: `${CLIENT_HELPERS}${PATH_TOKEN}${FAIL}
function render(d){
  $('org').textContent=d.organizationName;$('email').textContent=d.email;
  var box=$('topics');box.textContent='';
  d.topics.forEach(function(t){
    var row=document.createElement('div');row.className='topic';
    var cb=document.createElement('input');cb.type='checkbox';cb.id='t-'+t.id;cb.value=t.id;cb.checked=t.subscribed;
    var lb=document.createElement('label');lb.htmlFor=cb.id;lb.textContent=t.name;
    if(t.doiStatus==='pending'){var h=document.createElement('span');h.className='hint';h.textContent='Waiting for confirmation by email';lb.appendChild(h)}
    row.appendChild(cb);row.appendChild(lb);box.appendChild(row);
  });
  $('no-topics').hidden=d.topics.length>0;$('save').hidden=d.topics.length===0;
}
async function send(body,okText){
  $('save').disabled=$('all').disabled=true;show('status','Saving…');
  var res=await api('POST','/prefs/update/'+enc,body);
  $('save').disabled=$('all').disabled=false;
  if(!res.ok)return show('status',errorText(res),'error');
  render(res.body.data);show('status',okText,'ok');
}
(async function(){
  var res=await api('GET','/prefs/verify/'+enc);
  $('loading').hidden=true;
  if(!res.ok)return fail(res);
  render(res.body.data);$('prefs').hidden=false;
})();
$('form').addEventListener('submit',function(e){
  e.preventDefault();
  var topics=[].map.call(document.querySelectorAll('#topics input'),function(cb){return {id:cb.value,subscribed:cb.checked}});
  send({topics:topics},'Your preferences are saved.');
});
$('all').addEventListener('click',function(){send({unsubscribeAll:true},'You are unsubscribed from all lists.')});`,
  });

const confirmDoi = (done: boolean): RenderedPage =>
  renderPage({
    title: 'Confirm your subscription',
    body: `${LOADING}${ERROR_CARD}
<div id="ask" class="card" hidden>
  <p id="org" class="org"></p>
  <h1>Confirm your subscription</h1>
  <p>Confirm that <strong id="email"></strong> wants to receive <strong id="topic"></strong>.</p>
  <div class="actions"><button id="confirm" type="button">Confirm subscription</button></div>
  <p id="status" class="status" role="status" aria-live="polite"></p>
</div>
<div id="done" class="card" hidden>
  <p id="org2" class="org"></p>
  <h1 id="done-title" tabindex="-1">Subscription confirmed</h1>
  <p><strong id="email2"></strong> is now subscribed to <strong id="topic2"></strong>. Thank you!</p>
</div>
<noscript><div class="card">${
      done
        ? '<h1>Subscription confirmed</h1><p>Thank you!</p>'
        : '<h1>Confirm your subscription</h1><form method="post"><div class="actions"><button type="submit">Confirm subscription</button></div></form>'
    }</div></noscript>`,
    script: `${CLIENT_HELPERS}${FAIL}
var token=new URLSearchParams(location.search).get('token')||'';var q='?token='+encodeURIComponent(token);
function fill(d){
  var topic=d.topic?d.topic.name:d.organizationName;
  $('org').textContent=$('org2').textContent=d.organizationName;
  $('email').textContent=$('email2').textContent=d.email;
  $('topic').textContent=$('topic2').textContent=topic;
}
function showDone(){$('ask').hidden=true;$('done').hidden=false;$('done-title').focus()}
(async function(){
  var res=await api('GET','/confirm/doi/verify'+q);
  $('loading').hidden=true;
  if(!res.ok)return fail(res);
  fill(res.body.data);
  if(res.body.data.confirmed)return showDone();
  $('ask').hidden=false;
})();
$('confirm').addEventListener('click',async function(){
  var b=this;b.disabled=true;show('status','Confirming…');
  var res=await api('POST','/confirm/doi'+q,{});
  if(res.ok){show('status','');showDone()}else{b.disabled=false;show('status',errorText(res),'error')}
});`,
  });

/** A sandboxed frame for the customer's HTML: no scripts, links open outside the page. */
const FRAME_FILL = `
function frame(html){
  var f=$('frame');
  f.srcdoc='<base target="_blank">'+html;
  f.addEventListener('load',function(){try{var h=f.contentDocument.documentElement.scrollHeight;if(h)f.style.height=(h+16)+'px'}catch(e){}});
}`;

const archive = (): RenderedPage =>
  renderPage({
    title: 'Email',
    content: true,
    wide: true,
    body: `${LOADING}${ERROR_CARD.replace('This link does not work', 'This email is not available')}
<article id="view" hidden>
  <p id="org" class="org"></p>
  <h1 id="subject"></h1>
  <p id="sent" class="meta"></p>
  <iframe id="frame" title="Email content" sandbox="allow-same-origin allow-popups allow-popups-to-escape-sandbox" referrerpolicy="no-referrer"></iframe>
</article>`,
    script: `${CLIENT_HELPERS}${PATH_TOKEN}${FAIL}${FRAME_FILL}
(async function(){
  var res=await api('GET','/archive/'+enc);
  $('loading').hidden=true;
  if(!res.ok)return fail(res);
  var d=res.body.data;
  document.title=d.subject;$('subject').textContent=d.subject;$('org').textContent=d.organizationName;
  $('sent').textContent='Sent '+fmtDate(d.sentAt);
  frame(d.html);$('view').hidden=false;
})();`,
  });

const share = (): RenderedPage =>
  renderPage({
    title: 'Email preview',
    content: true,
    wide: true,
    body: `${LOADING}${ERROR_CARD.replace('This link does not work', 'This preview is not available')}
<article id="view" hidden>
  <p id="org" class="org"></p>
  <h1 id="subject"></h1>
  <p class="meta"><span id="preview"></span></p>
  <p id="expires" class="meta"></p>
  <iframe id="frame" title="Email preview" sandbox="allow-same-origin allow-popups allow-popups-to-escape-sandbox" referrerpolicy="no-referrer"></iframe>
</article>`,
    script: `${CLIENT_HELPERS}${PATH_TOKEN}${FAIL}${FRAME_FILL}
(async function(){
  var res=await api('GET','/share/'+enc);
  $('loading').hidden=true;
  if(!res.ok)return fail(res);
  var d=res.body.data;
  document.title='Preview: '+d.subject;$('subject').textContent=d.subject;$('org').textContent=d.organizationName+' · preview';
  $('preview').textContent=d.previewText;
  $('expires').textContent='This preview link expires '+fmtDate(d.expiresAt)+'.';
  frame(d.html);$('view').hidden=false;
})();`,
  });

/** Rendered once per process: the pages hold no per-request data. */
export const PAGES = {
  unsubscribe: unsubscribe(false),
  unsubscribeDone: unsubscribe(true),
  preferences: preferences(),
  confirmDoi: confirmDoi(false),
  confirmDoiDone: confirmDoi(true),
  archive: archive(),
  share: share(),
} as const;

export type PageName = keyof typeof PAGES;

/**
 * True when the client asks for a page rather than JSON: a browser navigation sends
 * `Accept: text/html,...`; fetch() and API clients send JSON or *\/*.
 */
export function wantsHtml(accept: string | undefined): boolean {
  if (!accept) return false;
  const a = accept.toLowerCase();
  const html = a.indexOf('text/html');
  if (html < 0) return false;
  const json = a.indexOf('application/json');
  return json < 0 || html < json;
}
