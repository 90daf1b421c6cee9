// The app of the test web's app-shell site (crawler.testweb.appshell), served as an external file
// beside Vue's production build, as script-built sites are. Every page is the same empty shell;
// this builds its text and links: some at once, some after 300 and 800 ms, some from a fetch() of
// JSON. Links are routed with history.pushState when clicked. The hostile pages do what their
// name says once the page is built.
(function () {
  "use strict";
  var path = location.pathname;
  var site = window.APP_ROUTES || {};  // from /static/routes.js, the build's route table
  var page = (site.pages || {})[path] || {title: "not found", now: [], late: [], later: [], text: ""};

  var app = Vue.createApp({
    setup: function () {
      var links = Vue.ref(page.now.slice());
      var paras = Vue.ref(page.text ? [page.text] : []);
      var route = Vue.ref(path);
      Vue.onMounted(function () {
        setTimeout(function () { links.value.push.apply(links.value, page.late); }, 300);
        setTimeout(function () { links.value.push.apply(links.value, page.later); }, 800);
        fetch("/api/page.json?path=" + encodeURIComponent(path))
          .then(function (r) { return r.json(); })
          .then(function (d) {
            links.value.push.apply(links.value, d.links);
            paras.value.push(d.text);
          })
          .then(hostile);
      });
      function go(href) {
        history.pushState({}, "", href);
        route.value = href;
      }
      return {title: page.title, links: links, paras: paras, route: route, go: go};
    },
    template: '<main><h1>{{ title }}</h1><p v-for="p in paras">{{ p }}</p>' +
      '<nav><a v-for="l in links" :key="l" :href="l" @click.prevent="go(l)">{{ l }}</a></nav></main>'
  });
  app.mount("#app");
  // A router's first move: the shell's URL replaced by the route's own (no request is made).
  history.pushState({route: path}, "", path + (path.indexOf("?") < 0 ? "?view=app" : ""));

  function addLink(href) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = href;
    document.body.appendChild(a);
  }

  function hostile() {
    if (path === "/hostile/popup") {
      window.open("/hostile/popup-target", "_blank");
      addLink("/hostile/after-popup");
    } else if (path === "/hostile/form") {
      setTimeout(function () {
        var f = document.createElement("form");
        f.method = "POST";
        f.action = "/hostile/submit";
        var i = document.createElement("input");
        i.name = "q";
        i.value = "1";
        f.appendChild(i);
        document.body.appendChild(f);
        f.submit();
      }, 50);
    } else if (path === "/hostile/redirect") {
      setTimeout(function () { location.href = "/hostile/redirect-target"; }, 50);
    } else if (path === "/hostile/canary") {
      fetch(site.canary + "/steal").catch(function () {}).finally(function () { addLink("/hostile/after-canary"); });
    } else if (path === "/hostile/robots") {
      fetch("/private/data.json").catch(function () {}).finally(function () { addLink("/hostile/after-robots"); });
    } else if (path === "/hostile/metadata") {
      Promise.allSettled([fetch("http://169.254.169.254/latest/meta-data/"), fetch("http://10.0.0.1/")])
        .then(function () { addLink("/hostile/after-metadata"); });
    } else if (path === "/hostile/dialog") {
      window.addEventListener("beforeunload", function (e) { e.preventDefault(); e.returnValue = "stay"; });
      alert("hello");
      var sure = confirm("sure?"), name = prompt("name?", "x");
      addLink("/hostile/after-dialog" + (sure || name ? "?answered" : ""));
    } else if (path === "/hostile/download") {
      var a = document.createElement("a");
      a.href = "/hostile/file.bin";
      a.download = "file.bin";
      a.click();
      var b = document.createElement("a");
      b.href = URL.createObjectURL(new Blob(["data"], {type: "application/octet-stream"}));
      b.download = "blob.bin";
      b.click();
      addLink("/hostile/after-download");
    } else if (path === "/hostile/loop") {
      setTimeout(function () { for (;;) {} }, 0);
    } else if (path === "/hostile/storm") {
      addLink("/hostile/after-storm");
      var tick = document.createElement("p");
      document.body.appendChild(tick);
      for (var n = 0; n < 100; n++) {
        setInterval(function () { tick.textContent = String(performance.now()); }, 0);
      }
    }
  }
})();
