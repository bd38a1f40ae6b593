// bernstein pages: the copy buttons, and on a task page the live part.
// Plain script, no build step, nothing inline (the pages' CSP allows only
// scripts from this origin). Everything else works without it.
(function () {
  'use strict';

  // Copy buttons: hidden until this script runs; the hash beside each stays
  // selectable text either way.
  function wireCopy(root) {
    var buttons = root.querySelectorAll('button.copy[data-copy]');
    for (var i = 0; i < buttons.length; i++) {
      var b = buttons[i];
      if (b.dataset.wired) continue;
      b.dataset.wired = 'true';
      b.hidden = false;
      b.addEventListener('click', onCopy);
    }
  }

  function onCopy(ev) {
    var b = ev.currentTarget;
    var done = function () {
      b.dataset.copied = 'true';
      b.textContent = 'Copied';
      setTimeout(function () {
        delete b.dataset.copied;
        b.textContent = 'Copy';
      }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(b.dataset.copy).then(done, function () { selectBeside(b); });
    } else {
      selectBeside(b);
    }
  }

  // selectBeside selects the hash next to b, for a manual copy.
  function selectBeside(b) {
    var code = b.parentNode && b.parentNode.querySelector('code');
    if (!code) return;
    var range = document.createRange();
    range.selectNodeContents(code);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  wireCopy(document);

  var body = document.body;
  var eventsURL = body.dataset.events;
  var taskPath = body.dataset.taskPath;
  var task = body.dataset.task;
  if (!eventsURL || !taskPath || !window.EventSource || !window.fetch) return;

  var status = document.getElementById('live-status');
  function setStatus(state, text) {
    body.dataset.live = state;
    if (!status) return;
    status.hidden = false;
    status.dataset.state = state;
    status.textContent = text;
  }

  function warn(err) {
    if (window.console) console.warn('bernstein:', err);
  }

  // fragment fetches a server-rendered fragment and returns its element.
  function fragment(url) {
    return fetch(url, { headers: { Accept: 'text/html' }, cache: 'no-store', credentials: 'same-origin' })
      .then(function (r) {
        if (!r.ok) throw new Error(url + ': ' + r.status);
        return r.text();
      })
      .then(function (html) {
        var t = document.createElement('template');
        t.innerHTML = html;
        return t.content.firstElementChild;
      });
  }

  function highlight(el, ms) {
    el.classList.remove('fresh');
    void el.offsetWidth; // restart the animation
    el.classList.add('fresh');
    setTimeout(function () { el.classList.remove('fresh'); }, ms);
  }

  function markLive(article) {
    article.dataset.inserted = 'live';
    wireCopy(article);
    highlight(article, 4000);
  }

  // --- the artifacts panel ---

  var groupsBox = document.getElementById('artifact-groups');

  function findGroup(key) {
    var gs = groupsBox.querySelectorAll('.artifact-group');
    for (var i = 0; i < gs.length; i++) if (gs[i].dataset.key === key) return gs[i];
    return null;
  }

  function findVersion(root, n) {
    var vs = root.querySelectorAll('article.version');
    for (var i = 0; i < vs.length; i++) if (vs[i].dataset.version === String(n)) return vs[i];
    return null;
  }

  // toHistory wraps an article for the history list. An earlier version
  // shows no content on the task page (its own page does), as rendered.
  function toHistory(article) {
    var c = article.querySelector('.content');
    var link = article.querySelector('a.vnum');
    if (c && link) {
      var p = document.createElement('p');
      p.className = 'view';
      var a = document.createElement('a');
      a.href = link.getAttribute('href');
      a.textContent = 'Show this version';
      p.appendChild(a);
      c.parentNode.replaceChild(p, c);
    }
    var li = document.createElement('li');
    li.appendChild(article);
    return li;
  }

  // place puts article into group at its place: the newest is the latest,
  // the others go to the history, newest first. False if already there.
  function place(group, article) {
    var n = Number(article.dataset.version);
    if (findVersion(group, n)) return false;
    var latestBox = group.querySelector('.latest');
    var list = group.querySelector('.history-list');
    var current = latestBox.querySelector('article.version');
    if (!current || n > Number(current.dataset.version)) {
      if (current) list.insertBefore(toHistory(current), list.firstChild);
      latestBox.appendChild(article);
      group.dataset.latest = String(n);
      group.dataset.type = article.dataset.type;
      var type = group.querySelector('.key-heading .type');
      if (type) type.textContent = article.dataset.type;
    } else {
      var li = toHistory(article);
      var before = null;
      for (var i = 0; i < list.children.length; i++) {
        var a = list.children[i].querySelector('article.version');
        if (a && Number(a.dataset.version) < n) { before = list.children[i]; break; }
      }
      list.insertBefore(li, before);
    }
    var h = list.children.length;
    group.querySelector('details.history').hidden = h === 0;
    group.querySelector('.history-count').textContent = String(h);
    var count = group.querySelector('.key-heading .count');
    if (count) {
      count.dataset.count = String(h + 1);
      count.textContent = (h + 1) + ' versions';
    }
    return true;
  }

  // placeGroup inserts a new key's group, keys in order.
  function placeGroup(node) {
    var gs = groupsBox.querySelectorAll('.artifact-group');
    var before = null;
    for (var i = 0; i < gs.length; i++) {
      if (gs[i].dataset.key > node.dataset.key) { before = gs[i]; break; }
    }
    groupsBox.insertBefore(node, before);
    var empty = document.getElementById('no-artifacts');
    if (empty) empty.hidden = true;
  }

  // Each key's updates run one after the other, in event order.
  var queues = {};
  function onArtifact(d) {
    var key = d.key, n = d.version;
    if (typeof key !== 'string' || typeof n !== 'number') return;
    var seg = encodeURIComponent(key);
    queues[key] = (queues[key] || Promise.resolve()).then(function () {
      var group = findGroup(key);
      if (group && findVersion(group, n)) return; // the page already shows it
      if (!group) {
        return fragment(taskPath + '/fragments/artifacts/' + seg).then(function (node) {
          if (!node || findGroup(key)) return;
          placeGroup(node);
          var vs = node.querySelectorAll('article.version');
          for (var i = 0; i < vs.length; i++) markLive(vs[i]);
        });
      }
      return fragment(taskPath + '/fragments/versions/' + seg + '/' + n).then(function (article) {
        if (article && place(group, article)) markLive(article);
      });
    }).catch(warn);
  }

  // --- the progress strip ---

  var stripBusy = false, stripAgain = false;
  function refreshStrip() {
    if (stripBusy) { stripAgain = true; return; }
    stripBusy = true;
    fragment(taskPath + '/fragments/strip').then(function (node) {
      var old = document.getElementById('progress-strip');
      if (!old || !node || node.id !== 'progress-strip') return;
      var moved = old.dataset.vectorHash !== node.dataset.vectorHash || old.dataset.phase !== node.dataset.phase;
      old.parentNode.replaceChild(node, old);
      if (moved) highlight(node, 2500);
    }).catch(warn).then(function () {
      stripBusy = false;
      if (stripAgain) { stripAgain = false; refreshStrip(); }
    });
  }

  // --- the stream ---

  var lastID = body.dataset.lastEventId || '0';
  var source = null, retry = null;

  function reload() { window.location.reload(); }

  function listen(type, fn) {
    source.addEventListener(type, function (ev) {
      if (ev.lastEventId) {
        lastID = ev.lastEventId;
        body.dataset.seenEventId = lastID;
      }
      var d = {};
      try { d = JSON.parse(ev.data) || {}; } catch (e) { d = {}; }
      if (d.task_id !== undefined && d.task_id !== task) return;
      fn(d);
    });
  }

  function connect(url) {
    source = new EventSource(url);
    setStatus('connecting', 'connecting…');
    source.onopen = function () { setStatus('live', 'live'); };
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (the server refused the stream): start over
        // from the last event seen.
        setStatus('offline', 'offline, retrying…');
        clearTimeout(retry);
        retry = setTimeout(function () {
          var u = new URL(eventsURL, window.location.href);
          u.searchParams.set('last_event_id', lastID);
          connect(u.pathname + u.search);
        }, 5000);
      } else {
        // EventSource reconnects by itself, sending Last-Event-ID.
        setStatus('reconnecting', 'reconnecting…');
      }
    };
    listen('task.artifact', onArtifact);
    listen('task.progress', refreshStrip);
    listen('task.transition', refreshStrip);
    listen('task.reset', reload);
    listen('stream.reset', reload);
  }

  connect(eventsURL);
})();
