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

  // A link to a version or a row (the timeline's) opens the <details> it
  // sits in.
  function openTarget() {
    var id = '';
    try { id = decodeURIComponent(window.location.hash.slice(1)); } catch (e) { return; }
    var el = id && document.getElementById(id);
    for (var p = el; p; p = p.parentElement) {
      if (p.tagName === 'DETAILS') p.open = true;
    }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();

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
  // the others go to the history, newest first, except a tampered one,
  // which goes to the flagged list (never collapsed out of sight). False if
  // already there.
  function place(group, article) {
    var n = Number(article.dataset.version);
    if (findVersion(group, n)) return false;
    var latestBox = group.querySelector('.latest');
    var list = group.querySelector('.history-list');
    var flagged = group.querySelector('.flagged-list');
    var current = latestBox.querySelector('article.version');
    var earlier = article;
    if (!current || n > Number(current.dataset.version)) {
      latestBox.appendChild(article);
      group.dataset.latest = String(n);
      group.dataset.type = article.dataset.type;
      var type = group.querySelector('.key-heading .type');
      if (type) type.textContent = article.dataset.type;
      earlier = current;
    }
    if (earlier) {
      var into = earlier.dataset.state === 'tampered' && flagged ? flagged : list;
      var en = Number(earlier.dataset.version);
      var li = toHistory(earlier);
      var before = null;
      for (var i = 0; i < into.children.length; i++) {
        var a = into.children[i].querySelector('article.version');
        if (a && Number(a.dataset.version) < en) { before = into.children[i]; break; }
      }
      into.insertBefore(li, before);
    }
    var h = list.children.length;
    var f = flagged ? flagged.children.length : 0;
    group.querySelector('details.history').hidden = h === 0;
    if (flagged) flagged.hidden = f === 0;
    group.querySelector('.history-count').textContent = String(h);
    var count = group.querySelector('.key-heading .count');
    var total = h + f + 1;
    if (count) {
      count.dataset.count = String(total);
      count.textContent = total + (total === 1 ? ' version' : ' versions');
    }
    addChoice(group, n);
    return true;
  }

  // addChoice offers version n in the key's comparison and makes the
  // default the newest two.
  function addChoice(group, n) {
    var form = group.querySelector('form.compare');
    if (!form) return;
    var sels = form.querySelectorAll('select');
    var nums = [];
    for (var i = 0; i < sels.length; i++) {
      var sel = sels[i];
      var have = false, before = null;
      for (var j = 0; j < sel.options.length; j++) {
        var v = Number(sel.options[j].value);
        if (v === n) have = true;
        if (!before && v < n) before = sel.options[j];
      }
      if (!have) {
        var o = document.createElement('option');
        o.value = String(n);
        o.textContent = 'v' + n;
        sel.insertBefore(o, before);
      }
      nums = [];
      for (var k = 0; k < sel.options.length; k++) nums.push(Number(sel.options[k].value));
    }
    if (sels.length === 2 && nums.length >= 2) {
      sels[0].value = String(nums[1]);
      sels[1].value = String(nums[0]);
    }
    form.hidden = nums.length < 2;
  }

  // placeGroup inserts a new key's group: keys in the order they were first
  // posted, so a new key goes last, on the panel's last page only, and only
  // when the filter keeps it.
  function placeGroup(node) {
    var keys = document.getElementById('keys');
    if (keys && keys.dataset.lastPage === 'false') return false;
    var filter = document.querySelector('#key-filter input[name="key"]');
    if (filter && filter.value && node.dataset.key.toLowerCase().indexOf(filter.value.toLowerCase()) < 0) return false;
    groupsBox.appendChild(node);
    var empty = document.getElementById('no-artifacts');
    if (empty) empty.hidden = true;
    var index = document.querySelector('#keys .key-index ul');
    if (index) {
      var li = document.createElement('li');
      li.dataset.key = node.dataset.key;
      var a = document.createElement('a');
      a.href = '#artifact-' + node.dataset.key;
      a.textContent = node.dataset.key;
      li.appendChild(a);
      index.appendChild(li);
    }
    return true;
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
          if (!placeGroup(node)) return;
          var vs = node.querySelectorAll('article.version');
          for (var i = 0; i < vs.length; i++) markLive(vs[i]);
        });
      }
      return fragment(taskPath + '/fragments/versions/' + seg + '/' + n).then(function (article) {
        if (article && place(group, article)) markLive(article);
      });
    }).catch(warn);
  }

  // --- the panels: integrity, progress strip, timeline ---

  // panel swaps in the fragment of one panel; a fetch asked for while one
  // is in flight runs once more after it, so the last event is always seen.
  function panel(id, path, changed, after) {
    var busy = false, again = false;
    return function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      fragment(taskPath + path).then(function (node) {
        var old = document.getElementById(id);
        if (!old || !node || node.id !== id) return;
        var moved = changed(old, node);
        // What the reader opened stays open.
        var open = old.querySelectorAll('details[open]');
        for (var i = 0; i < open.length; i++) {
          var d = open[i].className && node.querySelector('details.' + open[i].className.split(' ')[0]);
          if (d) d.open = true;
        }
        old.parentNode.replaceChild(node, old);
        if (moved) highlight(node, 2500);
        if (after) after(node);
      }).catch(warn).then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
    };
  }

  var refreshStrip = panel('progress-strip', '/fragments/strip', function (old, node) {
    return old.dataset.vectorHash !== node.dataset.vectorHash || old.dataset.phase !== node.dataset.phase;
  });
  var refreshIntegrity = panel('integrity', '/fragments/integrity', function (old, node) {
    return old.dataset.state !== node.dataset.state || old.dataset.tampered !== node.dataset.tampered ||
      old.dataset.unverifiable !== node.dataset.unverifiable || old.dataset.journalIdentity !== node.dataset.journalIdentity;
  }, function (node) {
    var arts = document.getElementById('artifacts');
    if (arts) arts.dataset.verified = String(node.dataset.tampered === '0' && node.dataset.unverifiable === '0');
  });
  var refreshTimeline = panel('timeline', '/fragments/timeline', function (old, node) {
    return old.dataset.rows !== node.dataset.rows || old.dataset.earned !== node.dataset.earned;
  });

  function refreshAll() {
    refreshStrip();
    refreshIntegrity();
    refreshTimeline();
  }

  // --- the keys' filter, as one types (the form filters on the server) ---

  var keyInput = document.querySelector('#key-filter input[name="key"]');
  if (keyInput) {
    keyInput.addEventListener('input', function () {
      var q = keyInput.value.toLowerCase();
      var items = document.querySelectorAll('#artifact-groups .artifact-group, #keys .key-index li');
      for (var i = 0; i < items.length; i++) {
        items[i].hidden = q !== '' && items[i].dataset.key.toLowerCase().indexOf(q) < 0;
      }
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
    listen('task.artifact', function (d) { onArtifact(d); refreshIntegrity(); refreshTimeline(); });
    listen('task.work', refreshTimeline);
    listen('task.progress', refreshAll);
    listen('task.transition', refreshAll);
    listen('task.reset', reload);
    listen('stream.reset', reload);
  }

  connect(eventsURL);
})();
