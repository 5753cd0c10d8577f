document.getElementById('app').textContent = 'fawn';
