// contextsvc dashboard: the little behaviour htmx does not cover.
// Tooltips for [data-tip], tab selection with arrow keys, copy buttons, and the
// small hooks the templates would otherwise write as inline handlers or htmx
// `js:` code, which the Content-Security-Policy forbids.
// Everything is delegated from document, so content swapped in by htmx works as is.
(function () {
  "use strict";

  // ---- tooltips ---------------------------------------------------------
  var tip = null;
  var current = null;

  function tooltip() {
    if (!tip) tip = document.getElementById("tooltip");
    return tip;
  }

  function place(x, y) {
    var t = tooltip();
    var pad = 14;
    var w = t.offsetWidth, h = t.offsetHeight;
    var left = Math.min(x + pad, window.innerWidth - w - 8);
    var top = y + pad + h > window.innerHeight ? y - h - pad : y + pad;
    t.style.left = Math.max(8, left) + "px";
    t.style.top = Math.max(8, top) + "px";
  }

  function show(el, x, y) {
    var t = tooltip();
    if (!t) return;
    current = el;
    t.textContent = el.getAttribute("data-tip");
    t.hidden = false;
    if (x === undefined) {
      var r = el.getBoundingClientRect();
      x = r.left + r.width / 2;
      y = r.bottom;
    }
    place(x, y);
  }

  function hide() {
    var t = tooltip();
    if (t) t.hidden = true;
    current = null;
  }

  document.addEventListener("mousemove", function (e) {
    var el = e.target.closest && e.target.closest("[data-tip]");
    if (!el) {
      if (current) hide();
      return;
    }
    if (el !== current) show(el, e.clientX, e.clientY);
    else place(e.clientX, e.clientY);
  });
  document.addEventListener("focusin", function (e) {
    var el = e.target.closest && e.target.closest("[data-tip]");
    if (el) show(el);
  });
  document.addEventListener("focusout", hide);
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") hide();
  });
  // A swap may remove the element under the pointer.
  document.addEventListener("htmx:beforeSwap", hide);

  // ---- tabs ---------------------------------------------------------------
  function select(tab) {
    var list = tab.closest("[role=tablist]");
    list.querySelectorAll("[role=tab]").forEach(function (t) {
      var on = t === tab;
      t.setAttribute("aria-selected", on ? "true" : "false");
      t.tabIndex = on ? 0 : -1;
    });
    var panel = document.getElementById(tab.getAttribute("aria-controls"));
    if (panel) panel.setAttribute("aria-labelledby", tab.id);
  }

  // Tabs with [data-hash] keep their place in the URL (#compactions, ...): a reload
  // or a shared link opens the same tab; the jump bar's links open them too.
  function tabForHash() {
    var name = location.hash.slice(1);
    if (!name) return null;
    return document.querySelector('[role=tab][data-hash="' + name.replace(/[^a-z0-9-]/gi, "") + '"]');
  }
  function openHashTab() {
    var tab = tabForHash();
    if (!tab) return;
    if (tab.getAttribute("aria-selected") !== "true") tab.click();
    var box = tab.closest("section");
    if (box) box.scrollIntoView();
  }
  // Once the page has loaded (charts and panels sized), bring the named part back into
  // view: content that grew above it may have pushed it down since the first jump.
  function revisitHash() {
    var name = location.hash.slice(1);
    var part = name && /^[a-z][a-z0-9-]*$/i.test(name) && document.getElementById(name);
    if (part && part.closest(".inspector-main")) part.scrollIntoView();
  }
  document.addEventListener("DOMContentLoaded", openHashTab);
  window.addEventListener("load", revisitHash);
  window.addEventListener("hashchange", openHashTab);

  document.addEventListener("click", function (e) {
    var tab = e.target.closest && e.target.closest("[role=tab]");
    if (tab) {
      select(tab);
      var hash = tab.getAttribute("data-hash");
      if (hash && location.hash !== "#" + hash) history.replaceState(null, "", "#" + hash);
    }

    var copy = e.target.closest && e.target.closest("[data-copy]");
    if (copy) {
      var field = document.querySelector(copy.getAttribute("data-copy"));
      if (!field) return;
      field.select();
      var done = function () {
        copy.textContent = "Copied";
        setTimeout(function () { copy.textContent = "Copy"; }, 1600);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(done, function () { document.execCommand("copy"); done(); });
      } else {
        document.execCommand("copy");
        done();
      }
    }
  });

  // ---- CSP-safe hooks ----------------------------------------------------
  // [data-select-on-focus]: a read-only field (a new key) selects itself.
  document.addEventListener("focusin", function (e) {
    if (e.target.matches && e.target.matches("[data-select-on-focus]")) e.target.select();
  });
  document.addEventListener("click", function (e) {
    if (!e.target.closest) return;
    // [data-close-more]: empty the expanded output / message viewer around it.
    var close = e.target.closest("[data-close-more]");
    if (close) {
      close.closest(".msg-more").replaceChildren();
      return;
    }
    // [data-show-timeline]: the "N new messages" pill opens the timeline tab.
    var pill = e.target.closest("[data-show-timeline]");
    if (pill) {
      pill.remove();
      var tab = document.getElementById("tab-timeline");
      if (tab) tab.click();
    }
  });
  // [data-poll-visible]: a polling element skips its request while the tab is
  // hidden (htmx keeps the timer running; the next tick after it shows asks again).
  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail.elt;
    if (document.visibilityState !== "visible" && elt.hasAttribute && elt.hasAttribute("data-poll-visible")) {
      e.preventDefault();
    }
  });
  // [data-send-seen]: tell the budget card the newest message the timeline shows,
  // so it can offer the "new messages" pill.
  document.addEventListener("htmx:configRequest", function (e) {
    var elt = e.detail.elt;
    if (!elt.hasAttribute || !elt.hasAttribute("data-send-seen")) return;
    var timeline = document.getElementById("timeline");
    e.detail.parameters.seen = (timeline && timeline.dataset.newest) || "";
  });

  document.addEventListener("keydown", function (e) {
    var tab = e.target.closest && e.target.closest("[role=tab]");
    if (!tab || (e.key !== "ArrowRight" && e.key !== "ArrowLeft" && e.key !== "Home" && e.key !== "End")) return;
    var tabs = Array.prototype.slice.call(tab.closest("[role=tablist]").querySelectorAll("[role=tab]"));
    var i = tabs.indexOf(tab);
    if (e.key === "ArrowRight") i = (i + 1) % tabs.length;
    else if (e.key === "ArrowLeft") i = (i - 1 + tabs.length) % tabs.length;
    else if (e.key === "Home") i = 0;
    else i = tabs.length - 1;
    e.preventDefault();
    tabs[i].focus();
    tabs[i].click();
  });
})();
