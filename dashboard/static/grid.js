// The live grid: listens to the sweep's event stream (EventSource) and swaps in the cells the server
// renders, and loads the sweep's rows a page at a time as they come into view. It formats nothing
// itself: every cell's text comes from /sweeps/{id}/live.json and every row from /sweeps/{id}/rows,
// rendered by the same templates as the page. An event asks for its own cell only; there is no polling
// loop, and the only timer counts the ⏳ clocks.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  var root = document.getElementById("sweep");
  if (!root) return;

  var liveUrl = root.dataset.liveUrl;
  var eventsUrl = root.dataset.eventsUrl;
  var status = document.getElementById("live");
  var rowsBody = document.getElementById("rows");
  var panel = document.getElementById("panel");
  var panelBody = document.getElementById("panel-body");
  var openCell = null; // the cell whose details are in the panel
  var openedFrom = null; // the link that opened it, focused again on close
  var rendered = {}; // cell id -> the HTML last swapped in
  var clockOffset = Date.parse(root.dataset.now) - Date.now(); // server time minus browser time
  var source = null;
  var retryMs = 1000;
  var refreshing = null;
  var again = false;
  var changed = {}; // cell ids whose events arrived since they were last asked for
  var everything = false; // the next refresh asks for every loaded row (the stream opened, or a sweep event)
  var loadingRows = null; // the fetch of the next rows, while it runs
  var MAX_CELLS = 500; // what one live.json answers at most

  function setStatus(state, text) {
    status.dataset.state = state;
    status.innerHTML = "";
    status.appendChild(document.createTextNode(text));
  }

  // --- the event stream -------------------------------------------------------------------------
  function connect() {
    source = new EventSource(eventsUrl);
    source.onopen = function () {
      retryMs = 1000;
      setStatus("live", "live");
      // Whatever changed before this stream opened (page load, or the server was away): resync once.
      everything = true;
      refresh();
    };
    source.onerror = function () {
      setStatus("reconnecting", "reconnecting…");
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (e.g. a 5xx while the server restarts): open a new stream ourselves.
        source.close();
        setTimeout(connect, retryMs);
        retryMs = Math.min(retryMs * 2, 10000);
      }
    };
    source.addEventListener("job", cellChanged);
    source.addEventListener("device", cellChanged); // a device result stored by a job or an import
    source.addEventListener("sweep", function () {
      everything = true; // created or cancelled: every cell may have changed
      refresh();
    });
  }

  function cellChanged(event) {
    var data = JSON.parse(event.data);
    if (data.cell_id !== null && data.cell_id !== undefined) changed[String(data.cell_id)] = true;
    refresh();
  }

  function loaded(id) {
    return document.querySelector('td[data-cell="' + id + '"]') !== null;
  }

  // What the next live.json asks for: every loaded row, or the changed cells that are loaded (at most
  // MAX_CELLS; the rest wait for the next fetch), or no cell (the progress and state only).
  function nextQuery() {
    if (everything) {
      everything = false;
      changed = {};
      // A row of the sweep is a policy: under it, one table row per stack when stacks are compared.
      return "offset=" + root.dataset.offset + "&rows=" + rowsBody.querySelectorAll("th.policy").length;
    }
    var ids = [];
    Object.keys(changed).forEach(function (id) {
      if (ids.length >= MAX_CELLS) return;
      if (loaded(id)) {
        ids.push(id);
        delete changed[id];
      } else if (!loadingRows) {
        delete changed[id]; // not on the page: the rows that show it will be rendered fresh
      }
    });
    if (ids.length >= MAX_CELLS) again = true;
    if (!ids.length) return "rows=0";
    return ids
      .map(function (id) {
        return "cells=" + id;
      })
      .join("&");
  }

  // One fetch at a time; events that arrive during it are folded into one more fetch after it.
  function refresh() {
    if (refreshing) {
      again = true;
      return refreshing;
    }
    var url = liveUrl + (liveUrl.indexOf("?") < 0 ? "?" : "&") + nextQuery();
    refreshing = fetch(url, { cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("live.json: " + response.status);
        return response.json();
      })
      .then(apply)
      .catch(function () {
        // The server is away: the stream reports it too, and resyncs when it opens again.
      })
      .then(function () {
        refreshing = null;
        if (again) {
          again = false;
          refresh();
        }
      });
    return refreshing;
  }

  function apply(data) {
    clockOffset = Date.parse(data.now) - Date.now();
    Object.keys(data.cells).forEach(function (id) {
      var html = data.cells[id];
      if (rendered[id] !== html) {
        rendered[id] = html;
        if (replaceCell(id, html) && openCell === id) loadDetails(id, false);
      }
      replaceSquare(id, data.squares[id]);
    });
    swap("progress", data.progress);
    var badge = document.getElementById("sweep-state");
    if (badge && badge.textContent !== data.state) {
      badge.textContent = data.state;
      badge.className = "badge " + data.state;
    }
    root.dataset.synced = String(Date.now());
    tick();
  }

  // --- rows, loaded as they come into view ----------------------------------------------------------
  var watcher =
    "IntersectionObserver" in window
      ? new IntersectionObserver(
          function (entries) {
            if (entries.some(function (entry) { return entry.isIntersecting; })) loadRows();
          },
          { rootMargin: "600px 0px" }
        )
      : null;

  function watchMore() {
    var more = document.getElementById("more-rows");
    if (watcher && more && more.dataset.rowsUrl) watcher.observe(more);
  }

  function parsed(html) {
    var template = document.createElement("template");
    template.innerHTML = html;
    return Array.prototype.slice.call(template.content.children);
  }

  function loadRows() {
    var more = document.getElementById("more-rows");
    if (loadingRows || !more || !more.dataset.rowsUrl) return;
    loadingRows = fetch(more.dataset.rowsUrl, { cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("rows: " + response.status);
        return response.json();
      })
      .then(function (data) {
        clockOffset = Date.parse(data.now) - Date.now();
        parsed(data.rows).forEach(function (tr) {
          rowsBody.appendChild(tr);
        });
        if (watcher) watcher.unobserve(more);
        var next = parsed(data.more);
        if (next.length) more.replaceWith(next[0]);
        else more.remove();
        root.dataset.rows = String(rowsBody.rows.length);
        tick();
      })
      .catch(function () {
        // Tried again when the link next comes into view.
      })
      .then(function () {
        loadingRows = null;
        // Events that came while these rows were on their way may be newer than what they show.
        if (Object.keys(changed).length) refresh();
        watchMore();
      });
  }

  function swap(id, html) {
    var node = document.getElementById(id);
    if (node && node.innerHTML !== html) node.innerHTML = html;
  }

  function replaceSquare(id, html) {
    var old = document.querySelector('#heatmap a[data-cell="' + id + '"]');
    if (!old || html === undefined || old.outerHTML === html) return;
    // Parsed inside an <svg>, so the square's elements are SVG ones.
    var fresh = parsed('<svg xmlns="http://www.w3.org/2000/svg">' + html + "</svg>")[0].firstElementChild;
    if (fresh) old.replaceWith(fresh);
  }

  function replaceCell(id, html) {
    var old = document.querySelectorAll('td[data-cell="' + id + '"]');
    if (!old.length) return false;
    var template = document.createElement("template");
    template.innerHTML = html;
    var fresh = Array.prototype.slice.call(template.content.children);
    if (fresh.length === old.length && sameCell(old, fresh)) return false;
    var hadFocus = old[0].contains(document.activeElement);
    var selected = old[0].classList.contains("selected");
    var parent = old[0].parentNode;
    fresh.forEach(function (td) {
      parent.insertBefore(td, old[0]);
      if (selected) td.classList.add("selected");
      td.classList.add("flash");
    });
    Array.prototype.forEach.call(old, function (td) {
      td.remove();
    });
    if (hadFocus) fresh[0].querySelector("a").focus();
    return true;
  }

  // Equal but for the ⏳ clocks' text (which the page itself advances) and the page's own classes.
  function sameCell(old, fresh) {
    for (var i = 0; i < old.length; i++) {
      if (comparable(old[i]) !== comparable(fresh[i])) return false;
    }
    return true;
  }

  function comparable(td) {
    var copy = td.cloneNode(true);
    copy.classList.remove("selected", "flash");
    copy.querySelectorAll("time[data-since]").forEach(function (node) {
      node.textContent = "";
    });
    return copy.outerHTML;
  }

  // --- ⏳ clocks ------------------------------------------------------------------------------------
  function duration(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + "s";
    var pad = function (n) {
      return (n < 10 ? "0" : "") + n;
    };
    if (seconds < 3600) return Math.floor(seconds / 60) + "m " + pad(seconds % 60) + "s";
    return Math.floor(seconds / 3600) + "h " + pad(Math.floor((seconds % 3600) / 60)) + "m";
  }

  function tick() {
    var now = Date.now() + clockOffset;
    document.querySelectorAll("time[data-since]").forEach(function (node) {
      var text = duration((now - Date.parse(node.dataset.since)) / 1000);
      if (node.textContent !== text) node.textContent = text;
    });
  }

  // --- details in the panel -----------------------------------------------------------------------
  function loadDetails(id, focus) {
    return fetch("/cells/" + id + "?partial=1", { cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("details: " + response.status);
        return response.text();
      })
      .then(function (html) {
        if (openCell !== id) return;
        panelBody.innerHTML = html;
        tick();
        if (focus) panel.focus();
      });
  }

  function select(id) {
    document.querySelectorAll("td.selected").forEach(function (td) {
      td.classList.remove("selected");
    });
    if (id === null) return;
    document.querySelectorAll('td[data-cell="' + id + '"]').forEach(function (td) {
      td.classList.add("selected");
    });
  }

  function openDetails(id, from) {
    openCell = id;
    openedFrom = from;
    select(id);
    panel.hidden = false;
    panel.setAttribute("aria-busy", "true");
    loadDetails(id, true)
      .catch(function () {
        window.location.href = "/cells/" + id; // the page of its own always works
      })
      .then(function () {
        panel.removeAttribute("aria-busy");
      });
  }

  function closeDetails() {
    if (openCell === null) return;
    var id = openCell;
    openCell = null;
    panel.hidden = true;
    panelBody.innerHTML = "";
    select(null);
    var link = document.querySelector('td[data-cell="' + id + '"] a.cell') || openedFrom;
    if (link) link.focus();
  }

  document.getElementById("panel-close").addEventListener("click", closeDetails);

  root.addEventListener("click", function (event) {
    var link = event.target.closest("a[data-cell-link]");
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    openDetails(link.dataset.cellLink, link);
  });

  // The heatmap's squares are links to the same cells.
  document.getElementById("heatmap").addEventListener("click", function (event) {
    var link = event.target.closest("a");
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey) return;
    var match = /\/cells\/(\d+)$/.exec(link.getAttribute("href") || "");
    if (!match) return;
    event.preventDefault();
    openDetails(match[1], link);
  });

  // --- keyboard: arrows move between cells (one tab stop per cell), Escape closes the panel ---------
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && openCell !== null) {
      event.preventDefault();
      closeDetails();
      return;
    }
    var link = document.activeElement;
    if (!link || !link.matches || !link.matches("#grid a.cell")) return;
    var moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    var move = moves[event.key];
    if (!move) return;
    var row = link.closest("tr");
    var rows = Array.prototype.slice.call(row.parentNode.rows);
    var links = Array.prototype.slice.call(row.querySelectorAll("a.cell"));
    var r = rows.indexOf(row) + move[0];
    var c = links.indexOf(link) + move[1];
    if (r < 0 || r >= rows.length) return;
    var target = rows[r].querySelectorAll("a.cell")[Math.max(0, c)];
    if (target) {
      event.preventDefault();
      target.focus();
    }
  });

  setStatus("reconnecting", "connecting…");
  watchMore();
  connect();
  // Leaving the page closes its stream: a page kept for the back button would otherwise hold its
  // connection, and after six of them Chromium queues the next page's requests behind them (about a
  // minute). Coming back to a kept page opens a new stream, which resyncs the cells.
  window.addEventListener("pagehide", function () {
    if (source) source.close();
  });
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) connect();
  });
  tick();
  setInterval(tick, 1000);
})();
